"""The bench's outputs: the text table, the recommendation, the CSV and the PNG chart."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from accel.bench.cases import REFERENCE
from accel.bench.run import Row

CSV_FIELDS: tuple[str, ...] = (
    "case", "mode", "status", "ran", "step_ms", "cpu_ms", "tokens_per_s", "mfu", "first_step_s", "peak_mib",
    "bytes_per_param", "loss", "note", "losses",
)  # fmt: skip


@dataclass(frozen=True)
class Recommendation:
    """The fastest row whose final loss is within `tolerance` (relative) of the reference's, if any."""

    row: Row | None
    reference: Row | None
    tolerance: float

    def text(self) -> str:
        """One or two sentences for the end of the report."""
        if self.reference is None or self.reference.loss is None:
            return f"No recommendation: the {REFERENCE} eager row did not run, so no loss to compare with."
        if self.row is None:
            return f"No recommendation: no row's loss is within {self.tolerance:.0%} of {REFERENCE}'s."
        speedup = self.reference.step_ms / self.row.step_ms if self.reference.step_ms and self.row.step_ms else 1.0
        return (
            f"Recommended: {self.row.case} ({self.row.mode}), {speedup:.2f}x the speed of {REFERENCE} eager, "
            f"final loss {self.row.loss:.4f} against {self.reference.loss:.4f} "
            f"(within the tolerance of {self.tolerance:.0%}; --tolerance changes it)."
        )


def reference_row(rows: Sequence[Row]) -> Row | None:
    """The fp32 eager row that ran, which the others are compared with."""
    return next((r for r in rows if r.case == REFERENCE and r.mode == "eager" and r.status == "ran"), None)


def recommend(rows: Sequence[Row], tolerance: float) -> Recommendation:
    """The fastest row that ran with a finite final loss within `tolerance` of the fp32 eager loss."""
    reference = reference_row(rows)
    if reference is None or reference.loss is None:
        return Recommendation(None, reference, tolerance)
    close = [r for r in rows if r.status == "ran" and loss_gap(r, reference) <= tolerance]
    best = min(close, key=lambda r: r.step_ms or math.inf, default=None)
    return Recommendation(best, reference, tolerance)


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
    ratio = reference.step_ms / row.step_ms if reference and reference.step_ms and row.step_ms else None
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
    """One line per row; `losses` holds every step's loss, separated by spaces."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for row in rows:
            values = {name: getattr(row, name) for name in CSV_FIELDS if name != "losses"}
            values["losses"] = " ".join(f"{loss:.6g}" for loss in row.losses)
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
    """A PNG: tokens/s per row that ran, and each row's loss curve. Returns why not, if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed, so no chart was drawn (pip install matplotlib, or accel[bench])"
    ran = [r for r in rows if r.status == "ran"]
    figure, (speed, losses) = plt.subplots(1, 2, figsize=(12, max(3.0, 0.4 * len(ran) + 1.5)))
    labels = [f"{r.case} ({r.mode})" for r in ran]
    speed.barh(labels, [r.tokens_per_s or 0.0 for r in ran], color=["C0" if r.mode == "eager" else "C1" for r in ran])
    speed.invert_yaxis()
    speed.set_xlabel("tokens/s (higher is faster)")
    low, high = _loss_range(rows)
    for label, row in zip(labels, ran, strict=True):
        off = not all(low <= loss <= high for loss in row.losses)  # NaN too
        losses.plot(range(1, len(row.losses) + 1), row.losses, label=label + (" (leaves the chart)" if off else ""))
    losses.set_ylim(low, high)
    losses.set_xlabel("step")
    losses.set_ylabel("training loss")
    losses.legend(fontsize="small")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return None
