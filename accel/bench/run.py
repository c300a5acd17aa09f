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
from accel.bench.memory_use import PeakMemory, available_bytes, state_bytes
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
    matmul dtype (on a CPU: one core's matmul rate in that dtype per CPU-second, times the threads); None without a
    count or a peak, or above the peak."""
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
    cpu_share: float | None = None
    """On a CPU running torch with several threads: the process's CPU time over the wall time of its timed steps
    (None elsewhere). Alone on its cores at least one thread always runs, so at least 1.0; below
    `STARVED_SHARE` other programs took the cores, and torch's threads then slow down unevenly
    (measured: fp32 40x slower per step beside two busy loops on 2 cores, native FP8 30x)."""
    speedups: list[float] = field(default_factory=list)
    """The reference's (fp32 eager) step time over this row's, for each step of the interleaved rounds (after
    the warm-up, and never the first step), the two timed in the same round, moments apart: > 1 is faster.
    Their median is `vs_reference`."""
    note: str = ""

    @property
    def vs_reference(self) -> float | None:
        """How many times faster than fp32 eager this row steps: the median of `speedups` (None without any)."""
        return statistics.median(self.speedups) if self.speedups else None


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


Job = tuple[Case, str]
"""A row to measure: a case and its mode ("eager" or "compiled")."""
ROOM_FACTOR = 2.0
"""Another case joins the ones training together while the device's free memory is more than this many
times what the reference case took (its measured peak): FP8's O1 and compiled rows take more than fp32."""


def run_case(
    work: Workload, case: Case, mode: str, warmup: int, lr: float, progress: Progress, flops: float | None = None
) -> Row:
    """Train a copy of `work.model` for `len(work.batches)` steps in `case` and `mode` (see `run_cases`)."""
    return run_cases(work, [(case, mode)], warmup, lr, progress, flops)[0]


def run_cases(
    work: Workload, jobs: list[Job], warmup: int, lr: float, progress: Progress, flops: float | None = None
) -> list[Row]:
    """Train a copy of `work.model` for each (case, mode) of `jobs`, interleaved; one row per job, in order.

    The first job is the reference (fp32 eager). Each job is prepared and trains its first
    max(warmup, 1) steps in turn, its peak memory measured meanwhile; then the remaining steps run
    in rounds, one step of every job per round, in an order that rotates each round. A load that
    comes and goes on a shared machine then falls on every row alike instead of on whichever ran at
    that moment, and each row's `speedups` (the reference's step time over the row's, round by
    round) compare steps taken moments apart. Each job still trains on the same batches in the same
    order: its losses are those of training it alone.

    Where the device has no room for every job at once (see ROOM_FACTOR), they train in groups,
    each with its own fresh copy of the reference to be timed against (the same losses: the same
    run again).

    Never raises for one job: one the Accelerator refuses (at construction or at prepare) is
    "skipped" with its reason, one that raises while training is "failed" with the error.
    """
    first = min(max(warmup, 1), len(work.batches))
    pending, rows = list(jobs[1:]), []
    reference: Row | None = None
    while reference is None or pending:  # each group takes at least one pending job
        again = reference is not None  # a later group: the reference's steps were counted once
        group = _train_group(work, jobs[0], pending, (first, warmup, lr), _quiet if again else progress, progress, flops)
        reference = reference or group[0]
        rows.extend(group[1:])
    return [reference, *rows]


def _train_group(
    work: Workload, reference: Job, pending: list[Job], steps: tuple[int, int, float], reference_progress: Progress,
    progress: Progress, flops: float | None,
) -> list[Row]:
    """Train the reference and as many of `pending` as there is room for (taken off it), interleaved; their rows.

    `steps` is (the steps each trains before the rounds, the warm-up steps, the learning rate).
    """
    first, warmup, lr = steps
    runs: list[_Run] = []
    try:
        rows = [_begin(work, reference, lr, first, reference_progress, runs)]
        timed_against = runs[0] if runs else None
        while pending and (len(rows) < 2 or timed_against is None or _room(timed_against)):
            rows.append(_begin(work, pending.pop(0), lr, first, progress, runs))
        for number, index in enumerate(range(first, len(work.batches))):
            for run in _rotated(runs, number):
                _steps(run, range(index, index + 1), reference_progress if run is timed_against else progress)
        for run in runs:
            _finish(run, warmup, work.tokens_per_step, flops)
            if timed_against is not None:
                run.row.speedups = _paired(timed_against.times, run.times, first)
    finally:
        for run in runs:
            run.close()
    return rows


def _begin(work: Workload, job: Job, lr: float, first: int, progress: Progress, runs: list[_Run]) -> Row:
    """Start `job` and train its first `first` steps, measuring its peak memory; added to `runs` if it runs."""
    run = _start(work, *job, lr)
    if run.row.status != "ran":
        return run.row
    runs.append(run)
    _steps(run, range(first), progress)
    peak = None if run.memory is None else run.memory.stop()  # _start measures every case that ran
    run.row.peak_mib = None if peak is None else peak / 2**20
    return run.row


def _quiet() -> None:
    """The progress of a reference trained again for a later group: its steps were counted once."""


def _room(reference: _Run) -> bool:
    """Whether the device has room for one more job beside those training (see ROOM_FACTOR)."""
    peak = reference.row.peak_mib
    free = available_bytes(reference.accelerator.device) if reference.accelerator is not None else None
    return peak is None or free is None or free > ROOM_FACTOR * peak * 2**20


def _paired(reference: list[float], times: list[float], first: int) -> list[float]:
    """The reference's step time over `times`'s, step by step from step `first`, where the rounds start: each
    pair was timed in the same round (the steps before, each job's own warm-up, ran one job after another)."""
    return [ref / own for ref, own in zip(reference[first:], times[first:], strict=False) if own > 0]


@dataclass
class _Run:
    """One case being trained: its row, its Accelerator, model and optimizer, and its step times so far."""

    row: Row
    accelerator: Any = None
    model: Any = None
    optimizer: Any = None
    batches: list[Any] = field(default_factory=list)
    loss_fn: Any = None
    parameters: int = 0
    memory: PeakMemory | None = None
    times: list[float] = field(default_factory=list)
    cpu_times: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def fail(self, error: Exception) -> None:
        """Mark the row failed with `error` in one line; the run takes no more steps."""
        self.row.status, self.notes = "failed", [one_line(f"{type(error).__name__}: {error}")]
        self.row.losses.clear()

    def close(self) -> None:
        """Free the case's memory and end its Accelerator; the row's note gets the notes collected."""
        if self.accelerator is not None:
            self.model = self.optimizer = None
            self.accelerator.free_memory()
            self.accelerator.end_training()
            self.accelerator = None
        self.row.note = "; ".join([*self.notes, self.row.note] if self.row.note else self.notes)


def _start(work: Workload, case: Case, mode: str, lr: float) -> _Run:
    """Build the case's Accelerator and prepare a fresh copy of the model (row "skipped" if either refuses)."""
    run = _Run(Row(case.name, mode))
    run.accelerator, refusal = build_accelerator(case, mode, run.notes)
    if run.accelerator is None:
        run.row.note = refusal or ""
        return run
    run.memory = PeakMemory(run.accelerator.device)
    run.memory.start()
    model = copy.deepcopy(work.model)
    run.parameters, run.loss_fn = sum(p.numel() for p in model.parameters()), work.loss_fn
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, eps=ADAM_EPS)
    try:
        run.model, run.optimizer = run.accelerator.prepare(model, optimizer)
    except BACKEND_REFUSALS as error:
        run.row.note = one_line(str(error))
        run.close()
        return run
    except Exception as error:  # noqa: BLE001 - one case failing must not end the others
        run.fail(error)
        run.close()
        return run
    run.row.status, run.row.ran = "ran", run.accelerator.precision.describe()
    device = run.accelerator.device
    run.batches = [(x.to(device), y.to(device)) for x, y in work.batches]
    return run


def _steps(run: _Run, indices: range, progress: Progress) -> None:
    """Train `run` on the batches at `indices`, the loop a user writes, timing each step (wall-clock and
    process CPU time); a step that raises marks the row failed."""
    if run.row.status != "ran":
        return
    accelerator, model, optimizer, loss_fn = run.accelerator, run.model, run.optimizer, run.loss_fn
    try:
        for index in indices:
            inputs, targets = run.batches[index]
            start, cpu_start = time.perf_counter(), time.process_time()
            loss = loss_fn(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            run.row.losses.append(loss.item())  # waits for the device: the step is complete
            run.times.append(time.perf_counter() - start)
            run.cpu_times.append(time.process_time() - cpu_start)
            progress()
    except Exception as error:  # noqa: BLE001 - one case failing must not end the others
        run.fail(error)


def _rotated(runs: list[_Run], number: int) -> list[_Run]:
    """`runs` starting at the `number`-th (modulo their count): each case follows each other in turn."""
    if not runs:
        return runs
    shift = number % len(runs)
    return runs[shift:] + runs[:shift]


def _finish(run: _Run, warmup: int, tokens: int, flops: float | None) -> None:
    """Fill the row of a case that trained every step: times, throughput, MFU, bytes per parameter, loss."""
    if run.row.status != "ran":
        return
    _fill(run.row, run.times, warmup, tokens)
    run.row.cpu_ms = statistics.median(run.cpu_times[warmup:] or run.cpu_times[-1:]) * 1e3
    if run.accelerator.device.type == "cpu" and torch.get_num_threads() > 1:
        run.row.cpu_share = sum(run.cpu_times[warmup:]) / max(sum(run.times[warmup:]), 1e-9)
    run.row.bytes_per_param = state_bytes(run.model, run.optimizer.optimizer) / max(run.parameters, 1)
    run.row.mfu = mfu(flops, run.row.tokens_per_s, run.accelerator.device, run.accelerator.precision.compute_dtype)


def _fill(row: Row, times: list[float], warmup: int, tokens: int) -> None:
    """Step time (median after the warm-up), spread, throughput, first step and final loss."""
    timed = times[warmup:] or times[-1:]
    row.step_ms = statistics.median(timed) * 1e3
    row.spread = step_spread(timed)
    row.tokens_per_s = tokens / (row.step_ms / 1e3)
    row.first_step_s = times[0]
    row.loss = row.losses[-1]


def step_spread(times: list[float]) -> float:
    """Half the interquartile range of `times` over their median (0.0 for fewer than two steps)."""
    if len(times) < 2:
        return 0.0
    low, _, high = statistics.quantiles(times, n=4, method="inclusive")
    return (high - low) / 2 / statistics.median(times)
