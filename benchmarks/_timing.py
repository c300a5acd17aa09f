"""Small timing helpers shared by the scripts in benchmarks/.

Kept free of accel imports so that a benchmark can time a hand-written loop with the same
tools it uses for accel.
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import Callable, Sequence
from time import perf_counter_ns

__all__ = ["format_table", "median_us", "time_steps"]


def time_steps(
    step: Callable[[], None], n: int, sync: Callable[[], None] | None = None
) -> list[int]:
    """Run `step` `n` times and return each call's duration in nanoseconds.

    The garbage collector is paused for the block (and run before it) so that a collection
    triggered by one loop's allocations is not charged to the other. `sync` (e.g.
    torch.cuda.synchronize) is called inside each timed step, so asynchronous devices
    are measured to completion.
    """
    gc.collect()
    gc.disable()
    times = [0] * n
    try:
        for i in range(n):
            start = perf_counter_ns()
            step()
            if sync is not None:
                sync()
            times[i] = perf_counter_ns() - start
    finally:
        gc.enable()
    return times


def median_us(times_ns: Sequence[int]) -> float:
    """Median of durations given in nanoseconds, in microseconds."""
    return statistics.median(times_ns) / 1e3


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain, aligned text table: text columns left-aligned, numbers right-aligned."""
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [
        all(isinstance(row[i], (int, float)) for row in rows) if rows else False
        for i in range(len(headers))
    ]

    def line(row: Sequence[str]) -> str:
        return "  ".join(
            cell.rjust(w) if num else cell.ljust(w)
            for cell, w, num in zip(row, widths, numeric, strict=True)
        ).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])


def _cell(value: object) -> str:
    """Format one table value: floats with a precision suited to their size."""
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}"
    return str(value)
