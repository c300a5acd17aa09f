"""Training one bench case: a fresh copy of the model through an Accelerator, timed step by step."""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from accel.bench.cases import Case, build_accelerator, one_line
from accel.bench.flops import mfu
from accel.bench.memory_use import PeakMemory, state_bytes
from accel.bench.workload import Workload
from accel.cli.capabilities import BACKEND_REFUSALS


@dataclass
class Row:
    """One row of the bench table. Times in milliseconds/seconds; None where the case did not run."""

    case: str
    mode: str
    status: str = "skipped"
    """"ran", "skipped" (cannot run here: `note` says why) or "failed" (raised while training)."""
    ran: str = ""
    """What the Accelerator ran: `accelerator.precision.describe()`, so a downgrade would show."""
    step_ms: float | None = None
    """Median step time over the timed steps (after the warm-up)."""
    cpu_ms: float | None = None
    """Median CPU time of this process per timed step (all its threads): steadier than `step_ms` on a
    CPU shared with other work, where a step waits for cores."""
    tokens_per_s: float | None = None
    mfu: float | None = None
    """Model FLOPs utilization: FLOPs per token (counted once) x tokens/s over the device's peak for the row's
    matmul dtype (on a CPU: an fp32 matmul measured once); None without a count or a peak."""
    first_step_s: float | None = None
    """The first step alone (compilation included in compiled mode)."""
    spread: float | None = None
    """How much the timed steps varied: half their interquartile range over their median (0.05: +-5%).
    Large on a machine busy with other work, where step times say more about the load than the precision."""
    peak_mib: float | None = None
    bytes_per_param: float | None = None
    """Weights, buffers and optimizer state, per parameter of the model as given."""
    loss: float | None = None
    """Training loss of the last step."""
    losses: list[float] = field(default_factory=list)
    note: str = ""


Progress = Callable[[], None]
"""Called after each training step (advances the progress bar)."""

ADAM_EPS = 1e-6
"""AdamW's eps in every case: torch's default 1e-8 rounds to 0 in fp16, which 16-true refuses."""


def load_compiler() -> None:
    """Load torch.compile's compiler (inductor) and build native FP8's first CPU kernel, untimed:
    the compiled rows and native FP8's fused CPU kernels load it on first use, and its code (some
    70 MiB resident) would otherwise count as the peak memory of whichever case came first."""
    import torch._inductor.compile_fx  # noqa: F401

    from accel.backends.native_fp8 import fused

    fused.available()


def run_case(
    work: Workload, case: Case, mode: str, warmup: int, lr: float, progress: Progress, flops: float | None = None
) -> Row:
    """Train a copy of `work.model` for `len(work.batches)` steps in `case` and `mode`.

    Never raises for one case: one the Accelerator refuses (at construction or at prepare) is
    "skipped" with its reason, one that raises while training is "failed" with the error.
    """
    row = Row(case.name, mode)
    notes: list[str] = []
    accelerator, refusal = build_accelerator(case, mode, notes)
    if accelerator is None:
        row.note = refusal or ""
        return row
    try:
        _measure(work, accelerator, row, warmup, lr, progress)
        row.mfu = mfu(flops, row.tokens_per_s, accelerator.device, accelerator.precision.compute_dtype)
    except Exception as error:  # noqa: BLE001 - one case failing must not end the others
        row.status, notes = "failed", [one_line(f"{type(error).__name__}: {error}")]
    finally:
        accelerator.free_memory()
        accelerator.end_training()
    if row.status != "ran":
        row.losses.clear()
    row.note = "; ".join([*notes, row.note] if row.note else notes)
    return row


def _measure(work: Workload, accelerator: Any, row: Row, warmup: int, lr: float, progress: Progress) -> None:
    """Prepare a fresh copy of the model and train it; fills `row` (status "skipped" if prepare refuses)."""
    memory = PeakMemory(accelerator.device)
    memory.start()
    model = copy.deepcopy(work.model)
    parameters = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, eps=ADAM_EPS)
    try:
        model, optimizer = accelerator.prepare(model, optimizer)
    except BACKEND_REFUSALS as error:
        row.note = one_line(str(error))
        return
    row.ran = accelerator.precision.describe()
    times, cpu_times = _train(work, accelerator, model, optimizer, row.losses, progress)
    row.status = "ran"
    _fill(row, times, warmup, work.tokens_per_step, memory.stop())
    row.cpu_ms = statistics.median(cpu_times[warmup:] or cpu_times[-1:]) * 1e3
    row.bytes_per_param = state_bytes(model, optimizer.optimizer) / max(parameters, 1)


def _train(
    work: Workload, accelerator: Any, model: Any, optimizer: Any, losses: list[float], progress: Progress
) -> tuple[list[float], list[float]]:
    """The training loop a user writes; each step's wall-clock and process CPU time in seconds. The
    losses are appended to `losses`."""
    device = accelerator.device
    batches = [(x.to(device), y.to(device)) for x, y in work.batches]
    loss_fn, times, cpu_times = work.loss_fn, [], []
    for inputs, targets in batches:
        start, cpu_start = time.perf_counter(), time.process_time()
        loss = loss_fn(model(inputs), targets)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())  # waits for the device: the step is complete
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
        progress()
    return times, cpu_times


def _fill(row: Row, times: list[float], warmup: int, tokens: int, peak: int | None) -> None:
    """Step time (median after the warm-up), throughput, first step, peak memory and final loss."""
    timed = times[warmup:] or times[-1:]
    row.step_ms = statistics.median(timed) * 1e3
    row.spread = step_spread(timed)
    row.tokens_per_s = tokens / (row.step_ms / 1e3)
    row.first_step_s = times[0]
    row.peak_mib = None if peak is None else peak / 2**20
    row.loss = row.losses[-1]


def step_spread(times: list[float]) -> float:
    """Half the interquartile range of `times` over their median (0.0 for fewer than two steps)."""
    if len(times) < 2:
        return 0.0
    low, _, high = statistics.quantiles(times, n=4, method="inclusive")
    return (high - low) / 2 / statistics.median(times)
