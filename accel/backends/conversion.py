"""Which linear layers of a model run in FP8: one rule and one report for every backend.

The linear layers are nn.Linear and transformers' Conv1D (GPT-2's: a Linear whose weight is
stored transposed, (in, out)); the native backend converts both, te, ao and msamp nn.Linear
only. Each gets a LayerDecision (converted, or skipped and why); the ConversionReport lists
them all and sums them up in one line. Every other module that holds a weight matrix (an
Embedding, nn.MultiheadAttention's in_proj_weight, ...) is listed too, as a HeldWeight with
the reason it stays out of FP8, so that nothing is left out silently. `plan_conversion`
decides, `replace_layers` swaps.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

if TYPE_CHECKING:
    from accel.backends.fp8.small_layers import SmallLayerRule

FP8_ALIGNMENT: int = 16
LINEAR = "Linear"
CONV1D = "Conv1D"

# Skip categories, in the order summary() lists them.
CONVERTED = "converted"
ALREADY = "already converted"
EXCLUDED = "excluded"
_NOT_ALIGNED_PREFIX = "not a multiple of "
NOT_ALIGNED = f"{_NOT_ALIGNED_PREFIX}{FP8_ALIGNMENT}"
EXTRA_STATE = "with extra parameters"
ROOT = "root module"
NOT_CALLED = "inside MultiheadAttention"
CONV1D_REFUSED = "Conv1D (converted by backend='native' only)"
SMALL = "small"
_SKIP_ORDER: tuple[str, ...] = (CONV1D_REFUSED, NOT_ALIGNED, SMALL, EXCLUDED, ALREADY, EXTRA_STATE, NOT_CALLED, ROOT)

CONV1D_REASON = (
    "transformers' Conv1D (a Linear with its weight stored transposed, as in GPT-2) is not converted: "
    "this backend's library replaces nn.Linear only; backend='native' converts Conv1D too"
)
"""The default reason a backend that converts nn.Linear only gives for a Conv1D."""


@dataclass(frozen=True)
class LayerDecision:
    """What conversion did with one nn.Linear: ``category`` is CONVERTED or a skip category."""

    name: str
    in_features: int
    out_features: int
    category: str
    reason: str
    kind: str = LINEAR
    """LINEAR (nn.Linear or a library's FP8 Linear) or CONV1D (transformers' Conv1D, weight (in, out))."""

    @property
    def converted(self) -> bool:
        return self.category == CONVERTED

    def line(self) -> str:
        verdict = "converted" if self.converted else "skipped"
        detail = f": {self.reason}" if self.reason else ""
        kind = "" if self.kind == LINEAR else f"{self.kind} "
        return f"{self.name} ({kind}{self.in_features} -> {self.out_features}): {verdict}{detail}"


@dataclass(frozen=True)
class HeldWeight:
    """A module outside the linear layers that holds a weight matrix, which stays out of FP8, and why."""

    name: str
    kind: str
    """The module's class name (Embedding, MultiheadAttention, ...)."""
    parameter: str
    shape: tuple[int, ...]
    reason: str

    def line(self) -> str:
        shape = "x".join(map(str, self.shape))
        return f"{self.name} ({self.kind}, {self.parameter} {shape}): not in FP8: {self.reason}"


class LayerDecisions:
    """What every per-layer report shares (FP8's conversion, bitsandbytes' quantization): `layers`,
    and the converted and skipped ones among them."""

    layers: tuple[LayerDecision, ...]

    @property
    def converted(self) -> tuple[LayerDecision, ...]:
        return tuple(d for d in self.layers if d.converted)

    @property
    def skipped(self) -> tuple[LayerDecision, ...]:
        return tuple(d for d in self.layers if not d.converted)

    @property
    def num_running(self) -> int:
        """Layers that now run converted: converted by this call or already converted."""
        return sum(d.category in (CONVERTED, ALREADY) for d in self.layers)


@dataclass(frozen=True)
class ConversionReport(LayerDecisions):
    """Every linear layer of the model, converted or skipped, with the reason; and the other
    modules holding a weight matrix (``others``), which stay out of FP8, with the reason."""

    layers: tuple[LayerDecision, ...]
    unmatched_patterns: tuple[str, ...] = ()
    others: tuple[HeldWeight, ...] = ()
    sharding: str = ""
    """How the FP8 layers run under FSDP2 (what is all-gathered, what is refused), or "" without FSDP."""
    small_layers: SmallLayerRule | None = None
    """The small-layer filter the backend applied (accel.backends.fp8.small_layers), or None."""

    @property
    def skipped_small(self) -> int:
        """Layers the small-layer filter kept out of FP8."""
        return sum(d.category == SMALL for d in self.layers)

    @property
    def num_fp8(self) -> int:
        """Layers that now run in FP8: converted by this call or already converted."""
        return self.num_running

    def summary(self) -> str:
        """One line, e.g. "FP8: converted 12 of 14 Linear layers (skipped: 1 not a multiple of 16, 1 excluded)",
        ending in "; weight matrices outside FP8: 1 Embedding" where other modules hold one."""
        kinds = "Linear and Conv1D" if any(d.kind == CONV1D for d in self.layers) else "Linear"
        line = f"FP8: converted {len(self.converted)} of {len(self.layers)} {kinds} layers"
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
        if self.others:
            kinds_held = dict.fromkeys(h.kind for h in self.others)
            held = ", ".join(f"{sum(h.kind == k for h in self.others)} {k}" for k in kinds_held)
            line += f"; weight matrices outside FP8: {held}"
        if self.unmatched_patterns:
            names = ", ".join(repr(p) for p in self.unmatched_patterns)
            line += f"; exclude patterns that matched no module: {names}"
        if self.sharding:
            line += f"; under FSDP2: {self.sharding}"
        if self.small_layers is not None and self.small_layers.limit:
            line += f"; {self.small_layers.describe()}"
        return line

    def details(self) -> str:
        """The summary (and the small-layer filter where off), then one line per linear layer and
        one per other module holding a weight matrix."""
        off = [f"  {self.small_layers.describe()}"] if self.small_layers is not None and not self.small_layers.limit else []
        return "\n".join(
            [self.summary(), *off, *(f"  {d.line()}" for d in self.layers), *(f"  {h.line()}" for h in self.others)]
        )

    def __str__(self) -> str:
        return self.details()


def plan_conversion(
    model: nn.Module,
    *,
    exclude_modules: tuple[str, ...] = (),
    is_converted: Callable[[nn.Module], bool],
    alignment: int = FP8_ALIGNMENT,
    alignment_reason: str = "",
    conv1d_refusal: str | None = CONV1D_REASON,
    small_layers: SmallLayerRule | None = None,
) -> ConversionReport:
    """Decide, for every linear layer of ``model``, whether it can run in FP8 (changes nothing).

    Eligible: an nn.Linear (subclasses too), or a transformers Conv1D where
    ``conv1d_refusal`` is None (else it is skipped with that reason), whose input and
    output widths are multiples of 16 (of ``alignment``, where a scaling needs more, with
    ``alignment_reason`` in the report), whose qualified name matches no
    ``exclude_modules`` pattern (fnmatch), that is not already converted
    (``is_converted``), is not ``model`` itself, is not the out_proj of an
    nn.MultiheadAttention (which never calls it), that ``small_layers`` (the FP8 backends'
    small-layer filter) does not find too small, and has no parameters, buffers or
    submodules beyond weight and bias. Every backend uses this rule, so a model converts
    the same way on each. The report also lists every other module holding a weight matrix.
    """
    _check_convert_args(model, exclude_modules)
    rule = _Rule(alignment, alignment_reason, conv1d_refusal, small_layers)
    decisions: list[LayerDecision] = []
    matched: set[str] = set()
    modules = dict(model.named_modules())
    for name, module in modules.items():
        converted = is_converted(module)
        if not (converted or isinstance(module, nn.Linear) or is_conv1d(module)):
            continue
        patterns = [p for p in exclude_modules if fnmatch.fnmatchcase(name, p)]
        matched.update(patterns)
        parent = modules[name.rpartition(".")[0]] if name else None
        decisions.append(_decide(name, module, patterns, parent, converted, rule))
    unmatched = tuple(p for p in exclude_modules if p not in matched)
    layer_names = {d.name for d in decisions}
    others = held_weights(modules, layer_names, conv1d_refusal is None)
    return ConversionReport(tuple(decisions), unmatched, others, small_layers=small_layers)


def is_conv1d(module: nn.Module) -> bool:
    """Is ``module`` transformers' Conv1D (or a subclass): y = x @ weight + bias, weight (in, out)?

    Recognised by its class (``transformers.*.Conv1D`` in the MRO) without importing
    transformers, and by a 2-D ``weight`` whose second dimension is ``nf``.
    """
    weight = getattr(module, "weight", None)
    return (
        _conv1d_class(module) is not None
        and isinstance(weight, torch.Tensor)
        and weight.dim() == 2
        and weight.shape[1] == getattr(module, "nf", None)
    )


def _conv1d_class(module: nn.Module) -> type | None:
    for cls in type(module).__mro__:
        if cls.__name__ == "Conv1D" and cls.__module__.startswith("transformers"):
            return cls
    return None


def held_weights(modules: Mapping[str, nn.Module], layer_names: set[str], conv1d_converted: bool) -> tuple[HeldWeight, ...]:
    """The modules, other than the linear layers ``layer_names``, with a 2-D weight parameter
    (``weight`` or ``*_weight``), each with the reason it stays out of FP8."""
    linears = "nn.Linear and Conv1D" if conv1d_converted else "nn.Linear"
    layer_weights = {id(getattr(modules[n], "weight", None)): n for n in layer_names}
    held: list[HeldWeight] = []
    for name, module in modules.items():
        if name in layer_names:
            continue
        for parameter, value in module._parameters.items():
            if value is not None and parameter.endswith("weight") and len(value.shape) == 2:
                reason = _held_reason(module, linears)
                if id(value) in layer_weights:  # tied, as GPT-2's wte and lm_head
                    reason += f" (the same Parameter is the weight of {layer_weights[id(value)]!r}, listed above)"
                held.append(HeldWeight(name, type(module).__name__, parameter, tuple(value.shape), reason))
                break
    return tuple(held)


def _held_reason(module: nn.Module, linears: str) -> str:
    if isinstance(module, (nn.Embedding, nn.EmbeddingBag)):
        return "a table look-up, not a matrix product (GEMM); FP8 runs matrix products only, so it stays in the base precision"
    if isinstance(module, nn.MultiheadAttention):
        return (
            "its input projection (in_proj_weight) is multiplied inside F.multi_head_attention_forward, not by "
            "an nn.Linear, so no FP8 layer can take it over; it runs in the base precision"
        )
    return (
        f"{type(module).__name__} is not a linear layer ({linears} are converted); "
        "what it computes with this weight runs in the base precision"
    )


def replace_layers(
    model: nn.Module, report: LayerDecisions, make_layer: Callable[[nn.Module], nn.Module]
) -> None:
    """Replace, in place, each layer `report` marks converted by ``make_layer(linear)``.

    A module registered under several names is replaced under all of them.
    """
    if not callable(make_layer):
        raise ValueError(
            f"make_layer={make_layer!r} is not supported; accepted: a callable (linear layer) -> nn.Module"
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


@dataclass(frozen=True)
class _Rule:
    """What a backend asks beyond the common rule: its dimension multiple, and whether it takes Conv1D."""

    alignment: int = FP8_ALIGNMENT
    alignment_reason: str = ""
    conv1d_refusal: str | None = CONV1D_REASON
    small_layers: SmallLayerRule | None = None


def _decide(
    name: str, layer: nn.Module, patterns: list[str], parent: nn.Module | None, converted: bool, rule: _Rule = _Rule()
) -> LayerDecision:
    conv1d = is_conv1d(layer) and not converted
    kind = CONV1D if conv1d or getattr(layer, "transposed_weight", False) else LINEAR
    if conv1d:  # is_conv1d checked that its weight is a 2-D tensor, (in, out)
        in_features, out_features = cast(torch.Tensor, layer.weight).shape
    else:  # nn.Linear, or a converted linear layer: both keep nn.Linear's int attributes
        in_features, out_features = cast(int, layer.in_features), cast(int, layer.out_features)

    def decision(category: str, reason: str = "") -> LayerDecision:
        return LayerDecision(name, int(in_features), int(out_features), category, reason, kind)

    if converted:
        return decision(ALREADY, "already converted")
    if name == "":
        return decision(
            ROOT,
            f"the model itself is the {kind} and cannot replace itself in place; "
            "wrap it, e.g. nn.Sequential(model)",
        )
    if patterns:
        return decision(EXCLUDED, f"excluded by pattern {patterns[0]!r}")
    if conv1d and rule.conv1d_refusal is not None:
        return decision(CONV1D_REFUSED, rule.conv1d_refusal)
    misaligned = _misaligned(int(in_features), int(out_features), rule)
    if misaligned:
        return decision(f"{_NOT_ALIGNED_PREFIX}{rule.alignment}", misaligned)
    if isinstance(parent, nn.MultiheadAttention):
        return decision(
            NOT_CALLED,
            "nn.MultiheadAttention uses this layer's weight directly, never its forward, "
            "so an FP8 layer here would not run in FP8",
        )
    extra = _extra_state(layer)
    if extra:
        return decision(
            EXTRA_STATE,
            f"{type(layer).__name__} has {', '.join(extra)} beyond weight and bias, "
            "which the FP8 layer would drop",
        )
    small = rule.small_layers.reason(int(in_features), int(out_features)) if rule.small_layers is not None else ""
    if small:
        return decision(SMALL, small)
    base = _conv1d_class(layer) if conv1d else nn.Linear
    if type(layer).forward is not base.forward:  # type: ignore[union-attr]  # conv1d: is_conv1d found the class
        return decision(CONVERTED, f"{type(layer).__name__}.forward is replaced by the FP8 GEMM")
    return decision(CONVERTED)


def _misaligned(in_features: int, out_features: int, rule: _Rule) -> str:
    """Why the widths do not fit the rule's multiple (e.g. "in_features 10 is not a multiple of 16"), or ""."""
    multiple = rule.alignment
    misaligned = [
        f"{field} {value}"
        for field, value in (("in_features", in_features), ("out_features", out_features))
        if value % multiple
    ]
    if not misaligned:
        return ""
    verb = "is not a multiple" if len(misaligned) == 1 else "are not multiples"
    because = f" ({rule.alignment_reason})" if rule.alignment_reason else ""
    return f"{' and '.join(misaligned)} {verb} of {multiple}{because}"


def _extra_state(linear: nn.Module) -> list[str]:
    """Names of the parameters, buffers and submodules a linear layer has besides weight and bias."""
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
