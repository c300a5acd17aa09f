"""A typical Hugging Face Accelerate training script, run by accel after changing only its imports.

Below the import lines, everything is written as for Accelerate, in the shape of Accelerate's own
examples/complete_nlp_example.py and examples/by_feature/checkpointing.py: seeded with
`set_seed`, tracked with TensorBoard (`log_with="tensorboard"`, `init_trackers`, `log`),
accumulating gradients with `accelerator.accumulate`, evaluating with `gather_for_metrics`,
checkpointing with `save_state` (every N batches into `step_<N>`, or every epoch into
`epoch_<e>`), resuming with `--resume_from_checkpoint` (`load_state`, then `skip_first_batches`
for the rest of the interrupted epoch; with `--use_stateful_dataloader`, `load_state` puts the
dataloader back where it stopped, in the same order, and nothing is skipped), printing on the
main process with `accelerator.print`, and closing the trackers with `end_training`. The model is
a small classifier on synthetic data, so a run takes seconds on a CPU.

    python examples/accelerate_style.py --with_tracking --checkpointing_steps epoch --output_dir runs/demo
    accel launch --num_processes 2 --cpu examples/accelerate_style.py --cpu --output_dir runs/demo2
    python examples/accelerate_style.py --resume_from_checkpoint runs/demo/epoch_0 --output_dir runs/demo

Each epoch prints `epoch <e>: {'accuracy': ..., 'eval_loss': ..., 'eval_samples': ...}`; the
final weights go to `<output_dir>/model` (`save_model`), the TensorBoard event files to
`<output_dir>/logs/accelerate_style/`. To run it under Accelerate itself, change the two import
lines back to `accelerate`.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator
from accel.utils import DataLoaderConfiguration, ProjectConfiguration, set_seed

NUM_FEATURES = 16
NUM_CLASSES = 4
TRAIN_SAMPLES = 480
EVAL_SAMPLES = 200  # not a multiple of the eval batch size times 2 processes: gather_for_metrics drops the padding
EVAL_BATCH_SIZE = 32


def make_dataset(num_samples: int, seed: int) -> TensorDataset:
    """Points in 16 dimensions, each labelled by the one of 4 fixed directions it projects most onto."""
    directions = torch.randn(NUM_CLASSES, NUM_FEATURES, generator=torch.Generator().manual_seed(1234))
    inputs = torch.randn(num_samples, NUM_FEATURES, generator=torch.Generator().manual_seed(seed))
    return TensorDataset(inputs, (inputs @ directions.T).argmax(dim=-1))


def get_dataloaders(accelerator: Accelerator, batch_size: int) -> tuple[DataLoader, DataLoader]:
    """The training (shuffled) and evaluation dataloaders, built on the main process first."""
    with accelerator.main_process_first():
        train_dataset = make_dataset(TRAIN_SAMPLES, seed=0)
        eval_dataset = make_dataset(EVAL_SAMPLES, seed=1)
    train_dataloader = DataLoader(train_dataset, shuffle=True, batch_size=batch_size)
    eval_dataloader = DataLoader(eval_dataset, shuffle=False, batch_size=EVAL_BATCH_SIZE)
    return train_dataloader, eval_dataloader


def linear_schedule_with_warmup(
    optimizer: torch.optim.Optimizer, num_warmup_steps: int, num_training_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """transformers' get_linear_schedule_with_warmup, without transformers."""

    def factor(step: int) -> float:
        if step < num_warmup_steps:
            return (step + 1) / (num_warmup_steps + 1)
        return max(0.0, (num_training_steps - step) / max(1, num_training_steps - num_warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def resume_from_checkpoint(accelerator: Accelerator, checkpoint: str, batches_per_epoch: int) -> tuple[int, int | None]:
    """Load the state saved in `checkpoint` (a `step_<n>` or `epoch_<e>` folder); return the epoch to
    start with and how many of its batches were already trained on (None: a whole epoch was)."""
    accelerator.print(f"Resumed from checkpoint: {checkpoint}")
    accelerator.load_state(checkpoint)
    training_difference = os.path.splitext(os.path.basename(os.path.normpath(checkpoint)))[0]
    if "epoch" in training_difference:
        return int(training_difference.replace("epoch_", "")) + 1, None
    resume_step = int(training_difference.replace("step_", ""))
    starting_epoch = resume_step // batches_per_epoch
    return starting_epoch, resume_step - starting_epoch * batches_per_epoch


def evaluate(accelerator: Accelerator, model: nn.Module, eval_dataloader: DataLoader) -> dict[str, float]:
    """Accuracy and mean loss over the whole evaluation set, gathered from every process."""
    model.eval()
    correct, count, loss_sum = 0, 0, 0.0
    for inputs, labels in eval_dataloader:
        with torch.no_grad():
            logits = model(inputs)
        losses = F.cross_entropy(logits.float(), labels, reduction="none")
        predictions, references, losses = accelerator.gather_for_metrics((logits.argmax(dim=-1), labels, losses))
        correct += (predictions == references).sum().item()
        count += references.numel()
        loss_sum += losses.sum().item()
    return {"accuracy": correct / count, "eval_loss": loss_sum / count, "eval_samples": count}


def train_epoch(
    accelerator: Accelerator,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    lr_scheduler: torch.optim.lr_scheduler.LRScheduler,
    active_dataloader: DataLoader,
    args: argparse.Namespace,
    overall_step: int,
) -> tuple[int, float]:
    """One pass over `active_dataloader`, saving the state every `--checkpointing_steps` batches;
    returns the updated count of batches trained on and the summed loss."""
    model.train()
    total_loss = 0.0
    for inputs, labels in active_dataloader:
        with accelerator.accumulate(model):
            loss = F.cross_entropy(model(inputs).float(), labels)
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
        total_loss += loss.detach().float().item()
        overall_step += 1
        if isinstance(args.checkpointing_steps, int) and overall_step % args.checkpointing_steps == 0:
            accelerator.save_state(os.path.join(args.output_dir, f"step_{overall_step}"))
    return overall_step, total_loss


def create_model_and_optimizer(
    config: dict[str, float | int], batches_per_epoch: int
) -> tuple[nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """The model (built after set_seed, so that the seed also sets its initial weights), its optimizer,
    and a linear schedule sized as Accelerate's examples size it, from the loader's length before prepare
    (a prepared scheduler steps once per process for each optimizer step, as under Accelerate, so with N
    processes, each seeing 1/N of the batches, the schedule still ends with the last epoch.)"""
    model = Classifier()
    optimizer = torch.optim.AdamW(params=model.parameters(), lr=config["lr"])
    lr_scheduler = linear_schedule_with_warmup(
        optimizer, num_warmup_steps=2,
        num_training_steps=(batches_per_epoch * config["num_epochs"]) // config["gradient_accumulation_steps"],
    )
    return model, optimizer, lr_scheduler


def training_function(config: dict[str, float | int], args: argparse.Namespace) -> None:
    """Train, evaluate, checkpoint and track, as Accelerate's complete examples do."""
    accelerator = Accelerator(
        cpu=args.cpu,
        mixed_precision=args.mixed_precision,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        log_with="tensorboard" if args.with_tracking else None,
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=args.use_stateful_dataloader),
        project_config=ProjectConfiguration(
            project_dir=args.output_dir, logging_dir=os.path.join(args.output_dir, "logs")
        ),
    )
    num_epochs = int(config["num_epochs"])
    if args.with_tracking:
        accelerator.init_trackers(os.path.split(__file__)[-1].split(".")[0], config)

    set_seed(int(config["seed"]))
    train_dataloader, eval_dataloader = get_dataloaders(accelerator, int(config["batch_size"]))
    model, optimizer, lr_scheduler = create_model_and_optimizer(config, len(train_dataloader))
    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
    )

    starting_epoch, resume_step = 0, None
    if args.resume_from_checkpoint:
        checkpoint = args.resume_from_checkpoint
        starting_epoch, resume_step = resume_from_checkpoint(accelerator, checkpoint, len(train_dataloader))
    overall_step = starting_epoch * len(train_dataloader)

    for epoch in range(starting_epoch, num_epochs):
        if args.resume_from_checkpoint and epoch == starting_epoch and resume_step is not None:
            # the batches of this epoch that the checkpoint had already trained on are skipped, unless
            # load_state has put a stateful dataloader back after them already
            if not args.use_stateful_dataloader:
                active_dataloader = accelerator.skip_first_batches(train_dataloader, resume_step)
            else:
                active_dataloader = train_dataloader
            overall_step += resume_step
        else:
            active_dataloader = train_dataloader
        overall_step, total_loss = train_epoch(
            accelerator, model, optimizer, lr_scheduler, active_dataloader, args, overall_step
        )
        eval_metric = evaluate(accelerator, model, eval_dataloader)
        accelerator.print(f"epoch {epoch}:", eval_metric)
        if args.with_tracking:
            accelerator.log(
                {**eval_metric, "train_loss": total_loss / len(train_dataloader), "epoch": epoch}, step=epoch
            )
        if args.checkpointing_steps == "epoch":
            accelerator.save_state(os.path.join(args.output_dir, f"epoch_{epoch}"))

    accelerator.wait_for_everyone()
    accelerator.save_model(model, os.path.join(args.output_dir, "model"))
    accelerator.end_training()


class Classifier(nn.Module):
    """A two-layer perceptron: 16 features in, 4 class scores out."""

    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(NUM_FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, NUM_CLASSES))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.layers(inputs)


def checkpointing_steps(value: str) -> int | str:
    """`--checkpointing_steps`: a number of batches, or "epoch"."""
    if value == "epoch":
        return value
    if value.isdigit() and int(value) > 0:
        return int(value)
    raise argparse.ArgumentTypeError(f"must be a positive number of batches or `epoch`, got {value!r}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A typical Accelerate training script (see the module docstring).")
    parser.add_argument("--mixed_precision", type=str, default=None, help="no, fp16, bf16 or fp8 (default: launch's)")
    parser.add_argument("--cpu", action="store_true", help="train on the CPU")
    parser.add_argument("--gradient_accumulation_steps", type=int, default=2, help="batches per optimizer step")
    parser.add_argument("--num_epochs", type=int, default=3)
    parser.add_argument("--checkpointing_steps", type=checkpointing_steps, default=None,
                        help="save the state every N batches (into step_<N>), or `epoch` (into epoch_<e>)")
    parser.add_argument("--resume_from_checkpoint", type=str, default=None, help="a step_<N> or epoch_<e> folder")
    parser.add_argument("--use_stateful_dataloader", action="store_true",
                        help="load_state puts the training dataloader back where the checkpoint was taken")
    parser.add_argument("--with_tracking", action="store_true", help="log to TensorBoard under <output_dir>/logs")
    parser.add_argument("--output_dir", type=str, default=".", help="where checkpoints, logs and the model go")
    args = parser.parse_args(argv)
    config = {"lr": 1e-2, "num_epochs": args.num_epochs, "seed": 42, "batch_size": 16,
              "gradient_accumulation_steps": args.gradient_accumulation_steps}
    training_function(config, args)


if __name__ == "__main__":
    main()
