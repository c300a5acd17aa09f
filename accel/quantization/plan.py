"""Which nn.Linear layers of a model get quantized, and the report that says so, layer by layer.

The report has the shape of FP8's (accel/backends/conversion.py): one LayerDecision per Linear
(converted, or skipped and why) and a one-line summary. The rules differ from FP8's where
bitsandbytes differs: any shape quantizes, and a layer is also skipped when its weight is shared
with another module (quantizing it would untie them) or when it belongs to a peft adapter.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from accel.backends.conversion import (
    ALREADY,
    CONVERTED,
    EXCLUDED,
    EXTRA_STATE,
    NOT_CALLED,
    ROOT,
    LayerDecision,
    LayerDecisions,
)

TIED = "weight shared"
ADAPTER = "peft adapter"
META = "on the meta device"
_SKIP_ORDER = (EXCLUDED, ALREADY, ADAPTER, TIED, EXTRA_STATE, NOT_CALLED, META, ROOT)


@dataclass(frozen=True)
class QuantizationReport(LayerDecisions):
    """Every nn.Linear of a model: quantized to `mode`, or skipped with the reason."""

    mode: str
    layers: tuple[LayerDecision, ...]
    unmatched_patterns: tuple[str, ...] = ()

    @property
    def num_quantized(self) -> int:
        """Layers that now run quantized: converted by this call or already quantized."""
        return self.num_running

    def summary(self) -> str:
        """One line, e.g. "bitsandbytes nf4-dq: quantized 24 of 25 Linear layers (skipped: 1 excluded)"."""
        line = f"bitsandbytes {self.mode}: quantized {len(self.converted)} of {len(self.layers)} Linear layers"
        counts = [f"{n} {c}" for c in _SKIP_ORDER if (n := sum(d.category == c for d in self.layers))]
        if counts:
            line += f" (skipped: {', '.join(counts)})"
        if self.unmatched_patterns:
            line += f"; ignore_modules patterns that matched no module: {', '.join(map(repr, self.unmatched_patterns))}"
        return line

    def details(self) -> str:
        """The summary, then one line per Linear layer."""
        return "\n".join([self.summary(), *(f"  {d.line()}" for d in self.layers)])

    def __str__(self) -> str:
        return self.details()


def plan_quantization(
    model: nn.Module, mode: str, ignore_modules: tuple[str, ...], is_quantized: Callable[[nn.Module], bool]
) -> QuantizationReport:
    """Decide for every nn.Linear of `model` whether it is quantized (changes nothing).

    A pattern of `ignore_modules` (fnmatch) keeps the module it matches and every Linear inside it.
    """
    modules = dict(model.named_modules(remove_duplicate=False))
    owners = _weight_owners(model)
    adapters = _adapter_prefixes(modules)
    matched: set[str] = set()
    decisions = []
    for name, module in modules.items():
        if not isinstance(module, nn.Linear):
            continue
        patterns = [p for p in ignore_modules if any(fnmatch.fnmatchcase(scope, p) for scope in _scopes(name))]
        matched.update(patterns)
        parent = modules.get(name.rpartition(".")[0]) if name else None
        decisions.append(_decide(name, module, patterns, parent, is_quantized(module), owners, adapters))
    unmatched = tuple(p for p in ignore_modules if p not in matched and not _matches_any(p, modules))
    return QuantizationReport(mode, tuple(decisions), unmatched)


def _decide(
    name: str, linear: nn.Linear, patterns: list[str], parent: nn.Module | None, quantized: bool,
    owners: dict[int, list[str]], adapters: list[str],
) -> LayerDecision:
    def decision(category: str, reason: str = "") -> LayerDecision:
        return LayerDecision(name, linear.in_features, linear.out_features, category, reason)

    if quantized:
        return decision(ALREADY, "already a bitsandbytes layer")
    if name == "":
        return decision(ROOT, "the model itself is the Linear and cannot replace itself; wrap it, e.g. nn.Sequential(model)")
    if patterns:
        return decision(EXCLUDED, f"kept by ignore_modules pattern {patterns[0]!r}")
    if any(name.startswith(prefix) for prefix in adapters):
        return decision(ADAPTER, "part of a peft adapter, which trains in full precision (QLoRA)")
    others = [n for n in owners.get(id(linear.weight), []) if n != f"{name}.weight"]
    if others:
        return decision(TIED, f"its weight is also {others[0]}; quantizing it would untie them")
    if isinstance(parent, nn.MultiheadAttention):
        return decision(NOT_CALLED, "nn.MultiheadAttention reads this layer's weight directly, never its forward")
    extra = [n for n in linear._parameters if n not in ("weight", "bias")] + list(linear._buffers) + list(linear._modules)
    if extra or type(linear).forward is not nn.Linear.forward:
        what = f"has {', '.join(extra)} beyond weight and bias" if extra else "has its own forward"
        return decision(EXTRA_STATE, f"{type(linear).__name__} {what}, which the bitsandbytes layer would drop")
    if linear.weight.device.type == "meta":
        return decision(META, "its weight is on the meta device (no values to quantize); materialize the model first")
    return decision(CONVERTED)


def _scopes(name: str) -> list[str]:
    """`name` and the names of the modules that contain it ('a.b.c' -> 'a.b.c', 'a.b', 'a')."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(len(parts), 0, -1)]


def _matches_any(pattern: str, modules: dict[str, nn.Module]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for name in modules if name)


def _weight_owners(model: nn.Module) -> dict[int, list[str]]:
    owners: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        owners.setdefault(id(param), []).append(name)
    return owners


def _adapter_prefixes(modules: dict[str, nn.Module]) -> list[str]:
    """Name prefixes of peft adapter modules (lora_A, lora_B, ...): every child of a peft tuner layer
    except its `base_layer`, the layer being adapted."""
    prefixes = []
    for name, module in modules.items():
        if type(module).__module__.startswith("peft.") and hasattr(module, "base_layer"):
            prefixes += [f"{name}.{child}." for child in module._modules if child != "base_layer"]
            prefixes += [f"{name}.{child}" for child in module._modules if child != "base_layer"]
    return prefixes
