"""What the native FP8 backend does to a model besides converting its layers: the forward
wrapper that switches FP8 with train/eval, the scalers it collects, the parameters it cannot give
O1/O2 storage (tied weights), and the warning for an exclude pattern that matched nothing."""

from __future__ import annotations

import fnmatch
from typing import Any

from torch import nn

from accel.backends.base import Forward, PrecisionBackend
from accel.backends.conversion import ConversionReport
from accel.backends.fp8.base_precision import FP8Forward
from accel.backends.native_fp8 import Float8Linear, float8_layers


class FP8TrainingForward(FP8Forward):
    """Runs FP8 while the model trains (in eval mode high precision unless asked), in the base precision."""

    __slots__ = ("_layers", "_fp8_in_eval", "_on")

    def __init__(self, forward: Forward, base: PrecisionBackend, layers: list[Float8Linear], fp8_in_eval: bool) -> None:
        super().__init__(forward, base)
        self._layers = layers
        self._fp8_in_eval = fp8_in_eval
        self._on = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        want = self.module.training or self._fp8_in_eval
        if want is not self._on:
            for layer in self._layers:
                layer.enabled = want
            self._on = want
        return self._run(*args, **kwargs)


def unmatched_pattern_message(pattern: str, report: ConversionReport) -> str:
    """Why an exclude pattern excluded nothing, with the fix when it names a nested layer.

    Patterns match whole qualified names (as TransformerEngine's and torchao's filters do), never
    suffixes: a bare "proj" matching every "attn.proj" and "mlp.proj" would exclude silently.
    """
    nested = [d.name for d in report.layers if fnmatch.fnmatchcase(d.name, f"*.{pattern}")]
    hint = (
        f" Patterns match the whole qualified name, so {pattern!r} does not match {nested[0]!r}; "
        f"write {'*' + pattern!r} to match it at any depth."
        if nested
        else ""
    )
    return f"FP8RecipeKwargs(exclude_modules=...): the pattern {pattern!r} matched no Linear layer of the model.{hint}"


def scalers_of(model: nn.Module) -> dict[str, Any]:
    """Every scaler of `model`'s FP8 layers, named '<layer>.<role>'."""
    return {
        f"{name}.{role}": scaler
        for name, layer in float8_layers(model).items()
        for role, scaler in layer.scalers().items()
    }


def shared_parameter_ids(model: nn.Module) -> set[int]:
    """ids of the parameters that more than one module holds (tied weights)."""
    owners: dict[int, set[int]] = {}
    for module in model.modules():
        for param in module._parameters.values():
            if param is not None:
                owners.setdefault(id(param), set()).add(id(module))
    return {pid for pid, modules in owners.items() if len(modules) > 1}
