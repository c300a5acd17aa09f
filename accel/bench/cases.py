"""What `accel bench` compares: one named case per precision and FP8 backend/level.

A case is only a recipe for an Accelerator (its `mixed_precision` and kwargs handlers); whether
it can run here is the Accelerator's own verdict, asked by building it (see `build_accelerator`),
so the bench skips exactly what a training script would be refused, with the same reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from accel._validation import choice_error


@dataclass(frozen=True)
class Case:
    """One precision to benchmark: `mixed_precision` plus FP8 recipe fields (empty unless fp8)."""

    name: str
    mixed_precision: str
    fp8_fields: dict[str, Any] = field(default_factory=dict)

    def accelerator_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of `Accelerator(...)` that select this case's precision."""
        from accel import FP8RecipeKwargs

        handlers = [FP8RecipeKwargs(**self.fp8_fields)] if self.fp8_fields else []
        return {"mixed_precision": self.mixed_precision, "kwarg_handlers": handlers}


CASES: tuple[Case, ...] = (
    Case("fp32", "no"),
    Case("fp16", "fp16"),
    Case("bf16", "bf16"),
    Case("16-true", "16-true"),
    Case("bf16-true", "bf16-true"),
    Case("fp8-native", "fp8", {"backend": "native"}),
    Case("fp8-native-O1", "fp8", {"backend": "native", "optimization_level": "O1"}),
    Case("fp8-native-O2", "fp8", {"backend": "native", "optimization_level": "O2"}),
    Case("fp8-ao", "fp8", {"backend": "ao"}),
    Case("fp8-te", "fp8", {"backend": "te"}),
    Case("fp8-msamp", "fp8", {"backend": "msamp"}),
)
"""Every case, in the order of the table; `fp32` first: the others' losses are compared with it."""

CASE_NAMES: tuple[str, ...] = tuple(case.name for case in CASES)
REFERENCE = "fp32"
"""The case whose final loss the recommendation's tolerance is measured against."""

MODES: tuple[str, ...] = ("eager", "compiled")
COMPILE_BACKEND = "inductor"
"""`Accelerator(dynamo_backend=...)` of the compiled rows: torch.compile's default backend."""


def select_cases(names: Sequence[str], flag: str = "--precisions") -> list[Case]:
    """The cases named in `names`, in table order; an unknown name raises with the accepted ones."""
    by_name = {case.name.lower(): case for case in CASES}
    chosen = set()
    for name in names:
        if name.lower() not in by_name:
            raise choice_error(flag, name, list(CASE_NAMES))
        chosen.add(name.lower())
    return [case for case in CASES if case.name.lower() in chosen]


def build_accelerator(case: Case, mode: str, notes: list[str]) -> tuple[Any, str | None]:
    """An Accelerator for `case` in `mode` ("eager" or "compiled"), or None and why it cannot run here.

    The refusal is the Accelerator's own error message (what was asked, why not, what to do).
    Its precision warnings (slow here, say) are appended to `notes` instead of being warned.
    """
    from accel import Accelerator
    from accel._warnings import collect_precision_warnings
    from accel.cli.capabilities import BACKEND_REFUSALS

    kwargs = case.accelerator_kwargs()
    if mode == "compiled":
        kwargs["dynamo_backend"] = COMPILE_BACKEND
    try:
        with collect_precision_warnings() as warnings:
            accelerator = Accelerator(**kwargs)
        notes.extend(one_line(text) for text in warnings)
        return accelerator, None
    except BACKEND_REFUSALS as error:
        return None, one_line(str(error))


def one_line(message: str, limit: int = 300) -> str:
    """The message on one line, cut at `limit` characters (the CSV keeps the table readable)."""
    line = " ".join(message.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
