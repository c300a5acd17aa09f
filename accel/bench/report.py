"""The bench's outputs: the text table, the recommendation, the CSV and the PNG chart."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel.bench.cases import REFERENCE
from accel.bench.run import Row

CSV_FIELDS: tuple[str, ...] = (
    "case", "mode", "status", "ran", "step_ms", "spread", "cpu_ms", "tokens_per_s", "mfu", "first_step_s", "peak_mib",
    "bytes_per_param", "cpu_share", "loss", "note", "losses", "speedups",
)  # fmt: skip
_LISTS = ("losses", "speedups")
"""The CSV fields that hold one number per step, separated by spaces."""


def counted(number: int, noun: str) -> str:
    """`number` and `noun`, plural unless the number is 1: counted(1, "mode") is "1 mode", counted(0, "warm-up step")
    is "0 warm-up steps"."""
    return f"{number} {noun}" + ("" if number == 1 else "s")


MIN_GAIN = 0.05
"""The smallest speed-up over fp32 eager that a recommendation counts as one."""
MIN_ROUNDS = 4
"""Interleaved rounds (timed steps) a row needs before it can be recommended."""
STARVED_SHARE = 0.9
"""fp32 eager's Row.cpu_share below which a CPU's step times cannot decide (torch's threads starved unevenly)."""
BUSY_SPREAD = 0.15
"""fp32 eager's spread above which the machine is said to be busy (Row.spread)."""


@dataclass(frozen=True)
class Recommendation:
    """The fastest row whose final loss is within `tolerance` (relative) of the reference's, if it is
    clearly faster: by more than MIN_GAIN in three interleaved rounds of four or more (`clear`).

    Each round times one step of every row, moments apart (accel.bench.run.run_cases), so a load
    that comes and goes on a shared machine slows the reference and the row alike in most rounds;
    a row only a little faster, or faster in some rounds only, is not recommended: on a machine
    shared with other work the order of such rows changes from run to run.
    """

    row: Row | None
    reference: Row | None
    tolerance: float
    fastest: Row | None = None
    """The fastest row within the loss tolerance, recommended or not."""

    def text(self) -> str:
        """One or two sentences for the end of the report."""
        if self.reference is None or self.reference.loss is None:
            return f"No recommendation: the {REFERENCE} eager row did not run, so no loss to compare with."
        if self.fastest is None:
            return f"No recommendation: no row's loss is within {self.tolerance:.0%} of {REFERENCE}'s."
        if _starved(self.reference):
            return (
                f"No recommendation: the machine was too busy for these step times. The process ran "
                f"{self.reference.cpu_share:.0%} of the time {REFERENCE} eager's steps took (alone on its cores, at "
                "least 100%); when other programs take the cores, torch's threads slow down unevenly, so the rows' "
                "order says more about them than about the precisions. Run again on a quiet machine, or with "
                "OMP_NUM_THREADS=1, where sharing the CPU slows every row alike."
            )
        busy = _busy(self.reference)
        if self.fastest is self.reference:
            return (
                f"Recommended: {REFERENCE} (eager): no other precision whose loss stays within {self.tolerance:.0%} "
                "of it ran faster here." + busy
            )
        fastest, rounds = self.fastest, len(self.fastest.speedups)
        measured = f"{speedup(fastest, self.reference):.2f}x, the median of {counted(rounds, 'interleaved round')}"
        if self.row is None:
            why = (f"{counted(rounds, 'timed round')} {'is' if rounds == 1 else 'are'} too few to tell (give --steps "
                   f"of at least --warmup + {MIN_ROUNDS})"
                   if rounds < MIN_ROUNDS else f"it was not more than {MIN_GAIN:.0%} faster in three rounds of four")
            return (
                f"No precision is clearly faster than {REFERENCE} eager here: the fastest, {fastest.case} "
                f"({fastest.mode}), is {measured}, but {why}." + busy
            )
        return (
            f"Recommended: {fastest.case} ({fastest.mode}), {measured} against {REFERENCE} eager (more than "
            f"{MIN_GAIN:.0%} faster in three rounds of four or more), final loss {fastest.loss:.4f} against "
            f"{self.reference.loss:.4f} (within the tolerance of {self.tolerance:.0%}; --tolerance changes it)." + busy
        )


def speedup(row: Row, reference: Row) -> float:
    """How many times faster `row` steps than `reference`: the median of its round-by-round speed-ups, or the
    ratio of the median step times where there are none (1.0 when a time is missing)."""
    if row.vs_reference is not None:
        return row.vs_reference
    return reference.step_ms / row.step_ms if reference.step_ms and row.step_ms else 1.0


def clear(row: Row) -> bool:
    """Whether `row` was more than MIN_GAIN faster than the reference in three of four rounds (MIN_ROUNDS or more)."""
    if len(row.speedups) < MIN_ROUNDS:
        return False
    faster = sum(gain > 1.0 + MIN_GAIN for gain in row.speedups)
    return 4 * faster >= 3 * len(row.speedups)


def _starved(reference: Row) -> bool:
    """Whether the reference's process got too little of the CPU for its threads (see Row.cpu_share)."""
    return reference.cpu_share is not None and reference.cpu_share < STARVED_SHARE


def _busy(reference: Row) -> str:
    spread = reference.spread or 0.0
    if spread <= BUSY_SPREAD:
        return ""
    return (
        f" The machine was busy: {REFERENCE}'s steps varied by +-{spread:.0%}, so these step times cannot "
        "decide between close rows; run again on a quiet machine (or with OMP_NUM_THREADS=1)."
    )


def reference_row(rows: Sequence[Row]) -> Row | None:
    """The fp32 eager row that ran, which the others are compared with."""
    return next((r for r in rows if r.case == REFERENCE and r.mode == "eager" and r.status == "ran"), None)


def recommend(rows: Sequence[Row], tolerance: float) -> Recommendation:
    """The fastest row that ran with a finite final loss within `tolerance` of the fp32 eager loss, if it is
    clearly faster (see Recommendation)."""
    reference = reference_row(rows)
    if reference is None or reference.loss is None:
        return Recommendation(None, reference, tolerance)
    close = [r for r in rows if r.status == "ran" and loss_gap(r, reference) <= tolerance]
    best = max(close, key=lambda r: 1.0 if r is reference else speedup(r, reference), default=None)
    if best is None:
        return Recommendation(None, reference, tolerance)
    chosen = best if not _starved(reference) and (best is reference or clear(best)) else None
    return Recommendation(chosen, reference, tolerance, best)


def loss_gap(row: Row, reference: Row) -> float:
    """|loss - reference loss| / reference loss; inf for a missing or non-finite loss."""
    if row.loss is None or reference.loss is None or not math.isfinite(row.loss):
        return math.inf
    return abs(row.loss - reference.loss) / max(abs(reference.loss), 1e-12)


def format_table(rows: Sequence[Row]) -> str:
    """The table, then one numbered line per note (why skipped or failed, slowness warnings)."""
    reference = reference_row(rows)
    headers = ["precision", "mode", "what ran", "step ms", "tokens/s", "MFU", "vs fp32", "peak MiB", "B/param", "loss", "status"]
    cells: list[list[str]] = []
    notes: list[str] = []
    for row in rows:
        mark = ""
        if row.note:
            if row.note not in notes:
                notes.append(row.note)
            mark = f"[{notes.index(row.note) + 1}]"
        cells.append(_cells(row, reference) + [f"{'' if row.status == 'ran' else row.status + ' '}{mark}"])
    lines = _aligned([headers, *cells])
    lines += [f"[{index}] {note}" for index, note in enumerate(notes, 1)]
    return "\n".join(lines)


def _cells(row: Row, reference: Row | None) -> list[str]:
    if row.status != "ran":
        return [row.case, row.mode, row.ran or "-", *(["-"] * 7)]
    ratio = speedup(row, reference) if reference is not None and reference.step_ms and row.step_ms else None
    return [
        row.case, row.mode, row.ran, _number(row.step_ms, "{:.1f}"), _number(row.tokens_per_s, "{:,.0f}"),
        _number(row.mfu, "{:.1%}"), _number(ratio, "{:.2f}x"), _number(row.peak_mib, "{:.0f}"),
        _number(row.bytes_per_param, "{:.1f}"), _number(row.loss, "{:.4f}"),
    ]  # fmt: skip


def _number(value: float | None, form: str) -> str:
    return "n/a" if value is None else form.format(value)


def _aligned(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return lines


def write_csv(rows: Sequence[Row], path: Path) -> None:
    """One line per row; `losses` holds every step's loss and `speedups` every timed round's speed-up against fp32
    eager, separated by spaces."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for row in rows:
            values = {name: getattr(row, name) for name in CSV_FIELDS if name not in _LISTS}
            values.update({name: " ".join(f"{value:.6g}" for value in getattr(row, name)) for name in _LISTS})
            writer.writerow({k: "" if v is None else v for k, v in values.items()})


def _loss_range(rows: Sequence[Row]) -> tuple[float, float]:
    """The loss axis: the reference's losses with a margin, so that one diverging run does not flatten the rest."""
    reference = reference_row(rows)
    finite = [x for x in (reference.losses if reference else []) if math.isfinite(x)]
    if not finite:
        finite = [x for row in rows for x in row.losses if math.isfinite(x)] or [0.0, 1.0]
    low, high = min(finite), max(finite)
    margin = 0.25 * (high - low) or 0.5
    return low - margin, high + margin


def write_chart(rows: Sequence[Row], path: Path, title: str) -> str | None:
    """A PNG: tokens/s per row that ran (with how much its steps varied), and how each row's loss differs
    from fp32 eager's at every step (curves that lie on top of each other say nothing; their differences
    do). Returns why not, if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed, so no chart was drawn (pip install matplotlib, or accel[bench])"
    ran = [r for r in rows if r.status == "ran"]
    figure, (speed, losses) = plt.subplots(1, 2, figsize=(12, max(3.0, 0.4 * len(ran) + 1.5)))
    labels = [f"{r.case} ({r.mode})" for r in ran]
    throughput = [r.tokens_per_s or 0.0 for r in ran]
    speed.barh(labels, throughput, xerr=[t * (r.spread or 0.0) for t, r in zip(throughput, ran, strict=True)],
               color=["C0" if r.mode == "eager" else "C1" for r in ran])
    speed.invert_yaxis()
    speed.set_xlabel("tokens/s (higher is faster; the bar's line: how much the steps varied)")
    reference = reference_row(rows)
    if reference is None:
        _plot_losses(losses, rows, ran, labels)
    else:
        _plot_loss_differences(losses, reference, ran, labels)
    losses.set_xlabel("step")
    losses.legend(fontsize="small")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return None


def _plot_loss_differences(axes: Any, reference: Row, ran: Sequence[Row], labels: Sequence[str]) -> None:
    """Each row's loss minus fp32 eager's at the same step (the same batches), on an axis fitted to them."""
    axes.axhline(0.0, color="grey", linewidth=0.8, label=f"{REFERENCE} (eager)")
    differences = {
        label: [a - b for a, b in zip(row.losses, reference.losses, strict=False)]
        for label, row in zip(labels, ran, strict=True) if row is not reference
    }
    diverged = {label for label, values in differences.items() if not all(math.isfinite(d) for d in values)}
    # the axis fits the rows that stayed finite: a diverging row's last finite values (a loss of 100 before
    # its NaN) would flatten every other curve onto the zero line
    kept = [abs(d) for label, values in differences.items() if label not in diverged for d in values]
    limit = 1.2 * max(kept, default=0.0) or 1e-3
    compiled = {label for label, row in zip(labels, ran, strict=True) if row.mode != "eager"}
    for label, values in differences.items():
        off = label in diverged or any(abs(d) > limit for d in values)
        axes.plot(range(1, len(values) + 1), values, label=label + (" (leaves the chart)" if off else ""),
                  linestyle="--" if label in compiled else "-")  # 16 rows share 10 colours: the mode tells them apart
    axes.set_ylim(-limit, limit)
    axes.set_ylabel(f"training loss minus {REFERENCE} eager's")


def _plot_losses(axes: Any, rows: Sequence[Row], ran: Sequence[Row], labels: Sequence[str]) -> None:
    """Each row's loss curve (without an fp32 eager row to compare with)."""
    low, high = _loss_range(rows)
    for label, row in zip(labels, ran, strict=True):
        off = not all(low <= loss <= high for loss in row.losses)  # NaN too
        axes.plot(range(1, len(row.losses) + 1), row.losses, label=label + (" (leaves the chart)" if off else ""))
    axes.set_ylim(low, high)
    axes.set_ylabel("training loss")
