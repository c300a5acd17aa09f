"""QLoRA on the example GPT: 4-bit frozen base weights + LoRA adapters, against full fine-tuning.

1. Pre-train the small GPT of examples/gpt.py in fp32 on Python source (the stdlib corpus), so that
   nothing is downloaded.
2. Fine-tune it on a different text (generated pseudo-English) twice, from the same weights:
   - full fine-tuning: every weight trains in fp32 with AdamW;
   - QLoRA: `BitsandbytesKwargs(mode="nf4-dq")` stores every Linear weight in 4 bits (frozen) and peft's
     LoRA adapters (in fp32) train on the attention and MLP layers.
3. Print, for both: bytes of the model's weights (with the quant state) and of the optimizer state, step
   time, and the final validation loss on the new text.

    python examples/qlora_gpt.py                    # 1-2 minutes on 2 idle CPU cores
    python examples/qlora_gpt.py --mode nf4 --lora_r 16
    pip install "accel[qlora]"                      # bitsandbytes + peft

Under `accel launch` (several processes) each process trains on its own batches and DDP averages
gradients, as in examples/train_gpt.py.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpt import GPT, CharDataset, GPTConfig, build_datasets, encode, generated_corpus  # noqa: E402
from train_gpt import evaluate, lm_loss  # noqa: E402

from accel import Accelerator, BitsandbytesKwargs  # noqa: E402

LORA_TARGETS = ["qkv", "proj", "fc"]
"""The Linear layers LoRA adapts (attention and MLP); lm_head is quantized and frozen."""


@dataclass
class Result:
    """One fine-tuning run: what it keeps in memory and how far it got."""

    name: str
    weight_bytes: int
    optimizer_bytes: int
    trainable: int
    seconds_per_step: float
    val_loss: float

    def line(self) -> str:
        return (
            f"{self.name:<34} | weights {self.weight_bytes / 1e6:6.3f} MB + optimizer state "
            f"{self.optimizer_bytes / 1e6:6.3f} MB = {(self.weight_bytes + self.optimizer_bytes) / 1e6:6.3f} MB | "
            f"{self.trainable:,} trainable | {self.seconds_per_step * 1e3:6.1f} ms/step | val loss {self.val_loss:.4f}"
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pretrain_steps", type=int, default=200)
    parser.add_argument("--finetune_steps", type=int, default=100)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--mode", default="nf4-dq", help="BitsandbytesKwargs mode for QLoRA (nf4-dq, nf4, fp4, ...)")
    parser.add_argument("--mixed_precision", default="no", help="passed to both fine-tuning Accelerators")
    parser.add_argument("--lora_r", type=int, default=8)
    parser.add_argument("--n_layer", type=int, default=2)
    parser.add_argument("--n_embd", type=int, default=128)
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args(argv)
    for name in ("pretrain_steps", "finetune_steps", "batch_size", "lora_r"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name} must be positive, got {getattr(args, name)}")
    return args


def loaders(train: CharDataset, val: CharDataset, args: argparse.Namespace) -> tuple[DataLoader, list]:
    generator = torch.Generator().manual_seed(args.seed)
    train_loader = DataLoader(train, batch_size=args.batch_size, shuffle=True, drop_last=True, generator=generator)
    stride = max(1, len(val) // (4 * args.batch_size))
    val_batches = list(DataLoader([val[i] for i in range(0, len(val), stride)][: 4 * args.batch_size], batch_size=args.batch_size))
    return train_loader, val_batches


def run(accelerator: Accelerator, model: nn.Module, optimizer: torch.optim.Optimizer, loader: DataLoader, steps: int) -> float:
    """Train `steps` optimizer steps; return the mean seconds per step."""
    model.train()
    done, start = 0, time.perf_counter()
    while done < steps:
        for x, y in loader:
            loss = lm_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            done += 1
            if done == steps:
                break
    return (time.perf_counter() - start) / steps


def tensor_bytes(tensors: object) -> int:
    """Bytes of every tensor in a (nested) state_dict."""
    if torch.is_tensor(tensors):
        return tensors.numel() * tensors.element_size()
    if isinstance(tensors, dict):
        return sum(tensor_bytes(v) for v in tensors.values())
    if isinstance(tensors, (list, tuple)):
        return sum(tensor_bytes(v) for v in tensors)
    return 0


def pretrain(config: GPTConfig, args: argparse.Namespace) -> dict[str, torch.Tensor]:
    accelerator = Accelerator(mixed_precision="no")
    train, val = build_datasets(config.block_size, seed=args.seed)
    model = GPT(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95))
    train_loader, val_batches = loaders(train, val, args)
    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
    run(accelerator, model, optimizer, train_loader, args.pretrain_steps)
    accelerator.print(f"pre-trained on Python source: {args.pretrain_steps} steps, val loss {evaluate(model, val_batches, accelerator.device):.4f}")
    return {k: v.detach().clone() for k, v in accelerator.get_state_dict(model).items()}


def finetune(name: str, config: GPTConfig, weights: dict, data: tuple, args: argparse.Namespace, qlora: bool) -> Result:
    import peft  # the optional extra: pip install "accel[qlora]"

    handlers = [BitsandbytesKwargs(mode=args.mode)] if qlora else []
    accelerator = Accelerator(mixed_precision=args.mixed_precision, kwarg_handlers=handlers)
    torch.manual_seed(args.seed)
    model = GPT(config)
    model.load_state_dict(weights)
    if qlora:  # adapters first, on the fp32 model; prepare then quantizes every base Linear to 4 bits
        lora = peft.LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, target_modules=LORA_TARGETS, lora_dropout=0.0)
        model = peft.get_peft_model(model, lora)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3 if qlora else 1e-3)
    train_loader, val_batches = loaders(*data, args)
    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
    if qlora and not any(type(m).__module__.startswith("accel.quantization") for m in model.modules()):
        raise SystemExit("this accel's Accelerator does not apply BitsandbytesKwargs yet (see docs/quantization.md)")
    seconds = run(accelerator, model, optimizer, train_loader, args.finetune_steps)
    weights_now = accelerator.unwrap_model(model).state_dict()
    return Result(
        name,
        weight_bytes=tensor_bytes(weights_now),
        optimizer_bytes=tensor_bytes(optimizer.state_dict()["state"]),
        trainable=sum(p.numel() for p in model.parameters() if p.requires_grad),
        seconds_per_step=seconds,
        val_loss=evaluate(model, val_batches, accelerator.device),
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    config = GPTConfig(n_layer=args.n_layer, n_embd=args.n_embd)
    weights = pretrain(config, args)
    text = encode(generated_corpus(seed=args.seed, n_chars=60_000))
    split = int(text.numel() * 0.9)
    data = (CharDataset(text[:split], config.block_size), CharDataset(text[split:], config.block_size))
    results = [
        finetune("full fine-tuning (fp32 AdamW)", config, weights, data, args, qlora=False),
        finetune(f"QLoRA ({args.mode} + LoRA r={args.lora_r})", config, weights, data, args, qlora=True),
    ]
    print(f"fine-tuned on new text for {args.finetune_steps} steps, mixed_precision={args.mixed_precision!r}:")
    for result in results:
        print(result.line())
    full, qlora = results
    ratio = (full.weight_bytes + full.optimizer_bytes) / (qlora.weight_bytes + qlora.optimizer_bytes)
    print(f"QLoRA keeps {ratio:.1f}x less in memory (weights + optimizer state); val loss {qlora.val_loss:.4f} vs {full.val_loss:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
