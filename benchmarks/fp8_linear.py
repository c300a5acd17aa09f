"""FP8 Linear speed: fp32 vs accel native FP8 vs torchao float8, side by side.

One step is forward + backward + AdamW of Linear(d, d) -> ReLU -> Linear(d, d)
on a batch of b rows, MSE loss. The variants run interleaved, one step each per
repetition, so that machine noise hits all of them alike. Reported: the medians
of wall time and of process CPU time (less sensitive to other processes on a
shared machine), with their ratios to fp32. A second table times one GEMM of
the same shape alone, to separate torch's FP8 kernel from the layer's overhead.

    PYTHONPATH=. python benchmarks/fp8_linear.py [--dim 2048] [--batch 2048] [--reps 7]

On CPUs with AMX-INT8, torch routes same-dtype FP8 GEMMs to oneDNN's reference
kernel, which is orders of magnitude slower; accel's native layer switches
oneDNN off around its own ``_scaled_mm`` calls, and this script does the same
around torchao's steps (the fp32 steps keep the default). ``--torchao-onednn``
keeps oneDNN on for torchao, to see that effect (use a small --dim).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import statistics
import time
from collections.abc import Callable, Iterator

import torch
from torch import nn

from accel.backends.native_fp8 import Float8Config, Float8Linear, convert_linears, scaler_group
from accel.backends.native_fp8.linear import scaled_mm

Step = Callable[[], float]
# name -> (step, run it with oneDNN enabled?)
Variants = dict[str, tuple[Step, bool]]
# name -> (wall ms per repetition, CPU ms per repetition, last loss)
Results = dict[str, tuple[list[float], list[float], float]]


def make_mlp(dim: int, seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))


def make_step(
    model: nn.Module,
    x: torch.Tensor,
    target: torch.Tensor,
    after_backward: Callable[[], None] = lambda: None,
) -> Step:
    """A closure running one training step and returning the loss."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), target)
        loss.backward()
        after_backward()
        optimizer.step()
        return loss.item()

    return step


def native_step(model: nn.Module, x: torch.Tensor, target: torch.Tensor) -> Step:
    config = Float8Config(fp8_format="HYBRID", scaling="delayed")
    report = convert_linears(
        model, make_layer=lambda linear: Float8Linear.from_linear(linear, config)
    )
    print(report.summary())
    group = scaler_group(model)

    def end_of_step() -> None:
        # What the backend does once per step: the NaN/inf check, then the scale update.
        if bool(group.found_nonfinite()):
            raise RuntimeError("non-finite amax in the benchmark")
        group.update()

    return make_step(model, x, target, end_of_step)


def torchao_step(model: nn.Module, x: torch.Tensor, target: torch.Tensor) -> Step | None:
    try:
        from torchao.float8 import convert_to_float8_training
    except ImportError as error:
        print(f"torchao: not available ({error})")
        return None
    convert_to_float8_training(model)
    return make_step(model, x, target)


def gemm_steps(dim: int, batch: int) -> Variants:
    """One GEMM of the benchmark's shape: fp32 F.linear against E4M3 x E4M3 _scaled_mm."""
    x, w = torch.randn(batch, dim), torch.randn(dim, dim)
    xq, wq = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    one = torch.tensor(1.0)

    def fp32() -> float:
        nn.functional.linear(x, w)
        return 0.0

    def fp8() -> float:
        scaled_mm(xq, wq.t(), one, one, torch.float32)
        return 0.0

    return {"GEMM fp32 (F.linear)": (fp32, True), "GEMM E4M3 (_scaled_mm)": (fp8, True)}


@contextlib.contextmanager
def onednn(enabled: bool) -> Iterator[None]:
    previous = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(enabled)
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(previous)


def timed(step: Step, onednn_enabled: bool) -> tuple[float, float, float]:
    """(wall ms, process CPU ms, loss) of one step."""
    with onednn(onednn_enabled):
        wall, cpu = time.perf_counter(), time.process_time()
        loss = step()
        return (time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3, loss


def measure(variants: Variants, reps: int, warmup: int) -> Results:
    """Warm every variant up, then run them interleaved ``reps`` times."""
    for step, flag in variants.values():
        for _ in range(warmup):
            timed(step, flag)
    results: Results = {name: ([], [], 0.0) for name in variants}
    for _ in range(reps):
        for name, (step, flag) in variants.items():
            wall, cpu, loss = timed(step, flag)
            walls, cpus, _ = results[name]
            results[name] = ([*walls, wall], [*cpus, cpu], loss)
    return results


def print_table(results: Results, baseline: str) -> None:
    base_wall = statistics.median(results[baseline][0])
    base_cpu = statistics.median(results[baseline][1])
    print(
        f"{'':30} {'wall ms':>9} {'ratio':>6} {'CPU ms':>9} {'ratio':>6} "
        f"{'min wall':>9} {'max wall':>9} {'loss':>9}"
    )
    for name, (walls, cpus, loss) in results.items():
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        print(
            f"{name:30} {wall:9.1f} {wall / base_wall:5.2f}x {cpu:9.1f} {cpu / base_cpu:5.2f}x "
            f"{min(walls):9.1f} {max(walls):9.1f} {loss:9.5f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--no-torchao", action="store_true")
    parser.add_argument("--torchao-onednn", action="store_true")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"d={args.dim}, batch={args.batch}, reps={args.reps}"
    )
    torch.manual_seed(0)
    x = torch.randn(args.batch, args.dim)
    target = torch.randn(args.batch, args.dim)
    base = make_mlp(args.dim, seed=1)
    variants: Variants = {
        "fp32": (make_step(copy.deepcopy(base), x, target), True),
        "native fp8 (delayed, HYBRID)": (native_step(copy.deepcopy(base), x, target), True),
    }
    if not args.no_torchao:
        step = torchao_step(copy.deepcopy(base), x, target)
        if step is not None:
            variants["torchao float8 (tensorwise)"] = (step, args.torchao_onednn)

    print("\nOne training step (forward + backward + AdamW), medians:")
    print_table(measure(variants, args.reps, args.warmup), "fp32")
    print("\nOne GEMM of the same shape alone (torch's kernels only):")
    print_table(measure(gemm_steps(args.dim, args.batch), args.reps, 1), "GEMM fp32 (F.linear)")


if __name__ == "__main__":
    main()
