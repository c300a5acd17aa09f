"""FSDP2 against DDP on this machine, with the example GPT (examples/gpt.py): memory, speed, loss.

    python benchmarks/fsdp.py [--processes 2] [--batch 8] [--steps 10] [--rounds 3] [--loss-steps 60]

Runs itself under `accel launch --cpu` and prints three tables:

* **memory**: bytes per process of parameters + gradients + optimizer state (AdamW), counted
  from the tensors themselves after a backward pass (a shard's own elements under FSDP2, O1/O2's
  FP8 gradients kept outside `param.grad` for native FP8 under DDP), for fp32, bf16, FP8 ao and
  FP8 native, DDP against FSDP2 (blocks wrapped with `transformer_based_wrap`);
* **speed**: the median step time of DDP and of FSDP2, measured interleaved (DDP, FSDP2, DDP,
  ...) over `--rounds` rounds in one launch, with the min / median / max of the per-round ratio;
* **loss**: the loss after `--loss-steps` steps of FSDP2 on N processes against one process with
  the same global batch (N x batch sequences, the same sequences), fp32.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "examples")]

PRECISIONS = {  # label -> (mixed_precision, FP8 backend or None)
    "fp32": ("no", None),
    "bf16": ("bf16", None),
    "fp8 ao": ("fp8", "ao"),
    "fp8 native": ("fp8", "native"),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=2, help="processes of the sharded runs (default 2)")
    parser.add_argument("--batch", type=int, default=8, help="sequences per process and step (default 8)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per round (default 10, after 3 warm-up)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved DDP/FSDP2 rounds (default 3)")
    parser.add_argument("--loss-steps", type=int, default=60, help="training steps of the loss comparison")
    parser.add_argument("--parts", default="memory,speed,loss", help="which tables (default all three)")
    parser.add_argument("--worker", choices=("memory", "speed", "loss"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return WORKERS[args.worker](args)
    parts = args.parts.split(",")
    if "memory" in parts:
        print(memory_table(launch("memory", args.processes, args), args.processes), flush=True)
    if "speed" in parts:
        print(speed_table(launch("speed", args.processes, args)), flush=True)
    if "loss" in parts:
        print(loss_table(launch("loss", 1, args), launch("loss", args.processes, args), args), flush=True)
    return 0


def launch(worker: str, processes: int, args: argparse.Namespace) -> Any:
    """Run `worker` under accel launch on `processes` processes; what process 0 reported.

    The one-process loss run gets the whole global batch (`--batch` x `--processes`) on its own.
    """
    batch = args.batch * args.processes if worker == "loss" and processes == 1 else args.batch
    command = [sys.executable, "-m", "accel", "launch", "--cpu", "--num_processes", str(processes), __file__,
               "--worker", worker, "--batch", str(batch), "--steps", str(args.steps), "--rounds", str(args.rounds),
               "--loss-steps", str(args.loss_steps)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_")}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("BENCH ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"the {worker} run on {processes} process(es) failed ({done.returncode}):\n"
                         f"{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("BENCH "):])


# ---------------------------------------------------------------------------------------- workers
def accelerator_for(precision: str, sharded: bool) -> Any:
    from accel import Accelerator, FP8RecipeKwargs, FullyShardedDataParallelPlugin

    mixed, backend = PRECISIONS[precision]
    handlers = [FP8RecipeKwargs(backend=backend, use_autocast_during_eval=True)] if backend else []
    plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap",
                                            transformer_cls_names_to_wrap=["Block"]) if sharded else None
    return Accelerator(cpu=True, mixed_precision=mixed, kwarg_handlers=handlers, fsdp_plugin=plugin)


def build(accelerator: Any) -> tuple[Any, Any]:
    """The example GPT and AdamW (built before prepare, as a script does), prepared."""
    import torch

    from gpt import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return accelerator.prepare(model, optimizer)


def global_batch(step: int, size: int, accelerator: Any) -> tuple[Any, Any]:
    """This process's part of step `step`'s global batch: `size` x processes token windows at seeded
    random places of the corpus, the same for any number of processes."""
    import torch

    from gpt import GPTConfig

    config = GPTConfig()
    data = corpus_tokens()
    total = size * accelerator.num_processes
    starts = torch.randint(len(data) - config.block_size - 1, (total,), generator=torch.Generator().manual_seed(step))
    mine = starts[accelerator.process_index * size:(accelerator.process_index + 1) * size]
    windows = torch.stack([data[s: s + config.block_size + 1] for s in mine.tolist()])
    return windows[:, :-1].to(accelerator.device), windows[:, 1:].to(accelerator.device)


_TOKENS: list[Any] = []


def corpus_tokens() -> Any:
    if not _TOKENS:
        import torch

        from gpt import build_corpus, encode

        _TOKENS.append(torch.tensor(encode(build_corpus()), dtype=torch.long))
    return _TOKENS[0]


def train_step(accelerator: Any, model: Any, optimizer: Any, batch: tuple[Any, Any], step: bool = True) -> float:
    import torch.nn.functional as F

    inputs, targets = batch
    logits = model(inputs)
    loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1))
    accelerator.backward(loss)
    if step:
        optimizer.step()
        optimizer.zero_grad()
    return float(accelerator.reduce(loss.detach(), "mean"))


def memory_worker(args: argparse.Namespace) -> int:
    """Bytes of parameters, gradients and optimizer state on this process, for every precision, DDP and FSDP2."""
    results: dict[str, dict[str, dict[str, int]]] = {}
    for precision in PRECISIONS:
        for sharded in (False, True):
            accelerator = accelerator_for(precision, sharded)
            model, optimizer = build(accelerator)
            train_step(accelerator, model, optimizer, global_batch(0, args.batch, accelerator))  # optimizer state
            train_step(accelerator, model, optimizer, global_batch(1, args.batch, accelerator), step=False)
            counted = count_bytes(accelerator, model, optimizer)
            results.setdefault(precision, {})["fsdp" if sharded else "ddp"] = counted
            accelerator.end_training()
    print("BENCH " + json.dumps(results), flush=True)
    return 0


def count_bytes(accelerator: Any, model: Any, optimizer: Any) -> dict[str, int]:
    """Bytes this process holds of the parameters, their gradients and the optimizer's state."""
    params = [p for p in model.parameters()]
    grads = [p.grad for p in params if p.grad is not None]
    compact = getattr(accelerator.precision, "compact_parameters", {})  # native O1/O2: FP8 gradients outside .grad
    grads += [part.grad.data for part in compact.values() if part.grad.data is not None]
    state = [t for s in optimizer.optimizer.state.values() for t in s.values() if hasattr(t, "numel")]
    return {"params": tensor_bytes(params), "grads": tensor_bytes(grads), "optimizer": tensor_bytes(state)}


def tensor_bytes(tensors: list[Any]) -> int:
    """Bytes of the elements this process holds: a DTensor's local shard, a tensor subclass's inner data."""
    total = 0
    for tensor in tensors:
        local = getattr(tensor, "_local_tensor", tensor)
        local = getattr(local, "_tensor", local)  # torchao's weight wrapper for the FP8 all-gather
        total += local.numel() * local.element_size()
    return total


def speed_worker(args: argparse.Namespace) -> int:
    """Median step time of DDP and FSDP2 (fp32), interleaved over rounds, on the same batches."""
    rounds: list[dict[str, float]] = []
    for _ in range(args.rounds):
        timed: dict[str, float] = {}
        for sharded in (False, True):
            accelerator = accelerator_for("fp32", sharded)
            model, optimizer = build(accelerator)
            batches = [global_batch(i, args.batch, accelerator) for i in range(4)]
            times = []
            for i in range(3 + args.steps):
                start = time.perf_counter()
                train_step(accelerator, model, optimizer, batches[i % 4])
                times.append(time.perf_counter() - start)
            timed["fsdp" if sharded else "ddp"] = statistics.median(times[3:])
            accelerator.end_training()
        rounds.append(timed)
    print("BENCH " + json.dumps(rounds), flush=True)
    return 0


def loss_worker(args: argparse.Namespace) -> int:
    """fp32 training of --loss-steps steps (FSDP2 when several processes); the loss of each step."""
    accelerator = accelerator_for("fp32", sharded=accelerator_processes() > 1)
    model, optimizer = build(accelerator)
    losses = [train_step(accelerator, model, optimizer, global_batch(s, args.batch, accelerator))
              for s in range(args.loss_steps)]
    print("BENCH " + json.dumps(losses) if accelerator.is_main_process else "", flush=True)
    accelerator.end_training()
    return 0


def accelerator_processes() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


WORKERS = {"memory": memory_worker, "speed": speed_worker, "loss": loss_worker}


# ---------------------------------------------------------------------------------------- tables
def memory_table(results: dict[str, dict[str, dict[str, int]]], processes: int) -> str:
    lines = [f"memory per process ({processes} processes): parameters + gradients + AdamW state, MiB",
             "| precision | DDP | FSDP2 | FSDP2 / DDP | DDP params/grads/state | FSDP2 params/grads/state |",
             "|---|---|---|---|---|---|"]
    mib = 1 << 20
    for precision, modes in results.items():
        ddp, fsdp = (sum(modes[m].values()) for m in ("ddp", "fsdp"))
        parts = {m: "/".join(f"{modes[m][k] / mib:.2f}" for k in ("params", "grads", "optimizer")) for m in modes}
        lines.append(f"| {precision} | {ddp / mib:.2f} | {fsdp / mib:.2f} | {fsdp / ddp:.0%} | {parts['ddp']} | "
                     f"{parts['fsdp']} |")
    return "\n".join(lines)


def speed_table(rounds: list[dict[str, float]]) -> str:
    ratios = sorted(r["fsdp"] / r["ddp"] for r in rounds)
    ddp, fsdp = (statistics.median(r[m] for r in rounds) * 1e3 for m in ("ddp", "fsdp"))
    return (f"step time, fp32 ({len(rounds)} interleaved rounds): DDP {ddp:.1f} ms, FSDP2 {fsdp:.1f} ms (medians); "
            f"FSDP2 / DDP min {ratios[0]:.2f}, median {statistics.median(ratios):.2f}, max {ratios[-1]:.2f}")


def loss_table(single: list[float], sharded: list[float], args: argparse.Namespace) -> str:
    tail = 5
    one, many = statistics.mean(single[-tail:]), statistics.mean(sharded[-tail:])
    return (f"loss after {args.loss_steps} steps (mean of the last {tail}), global batch "
            f"{args.batch * args.processes}: 1 process {one:.6f}, FSDP2 on {args.processes} {many:.6f}, relative "
            f"difference {abs(many - one) / one:.1e} (last step {single[-1]:.6f} / {sharded[-1]:.6f}; largest of any step "
            f"{max(abs(b - a) / a for a, b in zip(single, sharded)):.1e})")


if __name__ == "__main__":
    sys.exit(main())
