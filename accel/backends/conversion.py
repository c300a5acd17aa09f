"""Which nn.Linear layers of a model run in FP8: one rule and one report for every backend.

Each layer gets a LayerDecision (converted, or skipped and why); the ConversionReport lists
them all and sums them up in one line. `plan_conversion` decides, `replace_layers` swaps.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from torch import nn

FP8_ALIGNMENT: int = 16

# Skip categories, in the order summary() lists them.
CONVERTED = "converted"
ALREADY = "already converted"
EXCLUDED = "excluded"
_NOT_ALIGNED_PREFIX = "not a multiple of "
NOT_ALIGNED = f"{_NOT_ALIGNED_PREFIX}{FP8_ALIGNMENT}"
EXTRA_STATE = "with extra parameters"
ROOT = "root module"
NOT_CALLED = "inside MultiheadAttention"
_SKIP_ORDER: tuple[str, ...] = (NOT_ALIGNED, EXCLUDED, ALREADY, EXTRA_STATE, NOT_CALLED, ROOT)


@dataclass(frozen=True)
class LayerDecision:
    """What conversion did with one nn.Linear: ``category`` is CONVERTED or a skip category."""

    name: str
    in_features: int
    out_features: int
    category: str
    reason: str

    @property
    def converted(self) -> bool:
        return self.category == CONVERTED

    def line(self) -> str:
        verdict = "converted" if self.converted else "skipped"
        detail = f": {self.reason}" if self.reason else ""
        return f"{self.name} ({self.in_features} -> {self.out_features}): {verdict}{detail}"


@dataclass(frozen=True)
class ConversionReport:
    """Every nn.Linear of the model, converted or skipped, with the reason."""

    layers: tuple[LayerDecision, ...]
    unmatched_patterns: tuple[str, ...] = ()

    @property
    def converted(self) -> tuple[LayerDecision, ...]:
        return tuple(d for d in self.layers if d.converted)

    @property
    def skipped(self) -> tuple[LayerDecision, ...]:
        return tuple(d for d in self.layers if not d.converted)

    @property
    def num_fp8(self) -> int:
        """Layers that now run in FP8: converted by this call or already converted."""
        return sum(d.category in (CONVERTED, ALREADY) for d in self.layers)

    def summary(self) -> str:
        """One line, e.g. "FP8: converted 12 of 14 Linear layers (skipped: 1 not a multiple of 16, 1 excluded)"."""
        line = f"FP8: converted {len(self.converted)} of {len(self.layers)} Linear layers"
        if not self.layers:
            line += " (the model has no nn.Linear)"
        categories = {d.category for d in self.layers}
        alignments = sorted(c for c in categories if c.startswith(_NOT_ALIGNED_PREFIX) and c != NOT_ALIGNED)
        counts = [
            f"{n} {category}"
            for category in (*alignments, *_SKIP_ORDER)
            if (n := sum(d.category == category for d in self.layers))
        ]
        if counts:
            line += f" (skipped: {', '.join(counts)})"
        if self.unmatched_patterns:
            names = ", ".join(repr(p) for p in self.unmatched_patterns)
            line += f"; exclude patterns that matched no module: {names}"
        return line

    def details(self) -> str:
        """The summary, then one line per Linear layer."""
        return "\n".join([self.summary(), *(f"  {d.line()}" for d in self.layers)])

    def __str__(self) -> str:
        return self.details()


def plan_conversion(
    model: nn.Module,
    *,
    exclude_modules: tuple[str, ...] = (),
    is_converted: Callable[[nn.Module], bool],
    alignment: int = FP8_ALIGNMENT,
    alignment_reason: str = "",
) -> ConversionReport:
    """Decide, for every nn.Linear of ``model``, whether it can run in FP8 (changes nothing).

    Eligible: an nn.Linear (subclasses too) whose in_features and out_features are
    multiples of 16 (of ``alignment``, where a scaling needs more, with ``alignment_reason``
    in the report), whose qualified name matches no ``exclude_modules`` pattern
    (fnmatch), that is not already converted (``is_converted``), is not ``model`` itself,
    is not the out_proj of an nn.MultiheadAttention (which never calls it), and has no
    parameters, buffers or submodules beyond weight and bias. Every backend uses this
    rule, so a model converts the same way on each.
    """
    _check_convert_args(model, exclude_modules)
    decisions: list[LayerDecision] = []
    matched: set[str] = set()
    modules = dict(model.named_modules())
    for name, module in modules.items():
        if not isinstance(module, nn.Linear) and not is_converted(module):
            continue
        patterns = [p for p in exclude_modules if fnmatch.fnmatchcase(name, p)]
        matched.update(patterns)
        parent = modules[name.rpartition(".")[0]] if name else None
        decision = _decide(name, module, patterns, parent, is_converted(module), (alignment, alignment_reason))
        decisions.append(decision)
    unmatched = tuple(p for p in exclude_modules if p not in matched)
    return ConversionReport(tuple(decisions), unmatched)


def replace_layers(
    model: nn.Module, report: ConversionReport, make_layer: Callable[[nn.Linear], nn.Module]
) -> None:
    """Replace, in place, each layer `report` marks converted by ``make_layer(linear)``.

    A module registered under several names is replaced under all of them.
    """
    if not callable(make_layer):
        raise ValueError(
            f"make_layer={make_layer!r} is not supported; accepted: a callable nn.Linear -> nn.Module"
        )
    modules = dict(model.named_modules())
    replacements = {id(modules[d.name]): make_layer(modules[d.name]) for d in report.converted}
    _replace_children(model, replacements)


def _check_convert_args(model: object, exclude_modules: object) -> None:
    if not isinstance(model, nn.Module):
        raise ValueError(f"model={type(model).__name__} is not supported; accepted: an nn.Module")
    if not isinstance(exclude_modules, (tuple, list)) or not all(
        isinstance(p, str) for p in exclude_modules
    ):
        raise ValueError(
            f"exclude_modules={exclude_modules!r} is not supported; accepted: a tuple of "
            "module-name patterns (str, fnmatch syntax), e.g. ('lm_head', '*.gate')"
        )


def _decide(
    name: str, linear: nn.Linear, patterns: list[str], parent: nn.Module | None, converted: bool,
    alignment: tuple[int, str] = (FP8_ALIGNMENT, ""),
) -> LayerDecision:
    def decision(category: str, reason: str = "") -> LayerDecision:
        return LayerDecision(name, linear.in_features, linear.out_features, category, reason)

    if converted:
        return decision(ALREADY, "already converted")
    if name == "":
        return decision(
            ROOT,
            "the model itself is the Linear and cannot replace itself in place; "
            "wrap it, e.g. nn.Sequential(model)",
        )
    if patterns:
        return decision(EXCLUDED, f"excluded by pattern {patterns[0]!r}")
    multiple, why = alignment
    misaligned = [
        f"{field} {value}"
        for field, value in (("in_features", linear.in_features), ("out_features", linear.out_features))
        if value % multiple
    ]
    if misaligned:
        verb = "is not a multiple" if len(misaligned) == 1 else "are not multiples"
        because = f" ({why})" if why else ""
        return decision(f"{_NOT_ALIGNED_PREFIX}{multiple}", f"{' and '.join(misaligned)} {verb} of {multiple}{because}")
    if isinstance(parent, nn.MultiheadAttention):
        return decision(
            NOT_CALLED,
            "nn.MultiheadAttention uses this layer's weight directly, never its forward, "
            "so an FP8 layer here would not run in FP8",
        )
    extra = _extra_state(linear)
    if extra:
        return decision(
            EXTRA_STATE,
            f"{type(linear).__name__} has {', '.join(extra)} beyond weight and bias, "
            "which the FP8 layer would drop",
        )
    if type(linear).forward is not nn.Linear.forward:
        return decision(CONVERTED, f"{type(linear).__name__}.forward is replaced by the FP8 GEMM")
    return decision(CONVERTED)


def _extra_state(linear: nn.Linear) -> list[str]:
    """Names of the parameters, buffers and submodules a Linear has besides weight and bias."""
    names = [n for n in linear._parameters if n not in ("weight", "bias")]
    names += list(linear._buffers)
    names += list(linear._modules)
    return names


def _replace_children(model: nn.Module, replacements: Mapping[int, nn.Module]) -> None:
    if not replacements:
        return
    for parent in list(model.modules()):
        for child_name, child in list(parent._modules.items()):
            if child is not None and id(child) in replacements:
                setattr(parent, child_name, replacements[id(child)])
