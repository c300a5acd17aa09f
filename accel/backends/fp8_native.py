"""The native FP8 backend: accel's own FP8 GEMMs on torch's float8 dtypes, on any device.

Every eligible nn.Linear becomes a Float8Linear (same Parameters, same names) whose three
GEMMs run through torch._scaled_mm with TransformerEngine's delayed (or current) scaling.
Once per optimizer step the amaxes are rolled into their histories; a step in which any FP8
tensor held inf or NaN is skipped, like a GradScaler skips an overflowing step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from accel.backends.base import Forward, ForwardWrapper
from accel.backends.fp8 import FP8Backend, register_fp8_backend
from accel.backends.native_fp8 import Float8Config, Float8Linear, ScalerGroup, convert_linears, float8_layers
from accel.kwargs_handlers import Handlers


class FP8TrainingForward(ForwardWrapper):
    """Runs FP8 while the model trains; in eval mode high precision unless asked otherwise."""

    __slots__ = ("_layers", "_fp8_in_eval", "_on")

    def __init__(self, forward: Forward, layers: list[Float8Linear], fp8_in_eval: bool) -> None:
        super().__init__(forward)
        self._layers = layers
        self._fp8_in_eval = fp8_in_eval
        self._on = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        want = self.__wrapped__.__self__.training or self._fp8_in_eval
        if want is not self._on:
            for layer in self._layers:
                layer.enabled = want
            self._on = want
        return self.__wrapped__(*args, **kwargs)


@register_fp8_backend
class NativeFP8(FP8Backend):
    """FP8 GEMMs in plain PyTorch: CPU and GPU alike, the reference for the other backends."""

    library = "native"
    scalings = ("delayed", "current")
    honoured_fields = frozenset(
        {"fp8_format", "margin", "amax_history_len", "amax_compute_algo", "use_autocast_during_eval", "exclude_modules"}
    )

    def __init__(self, device: torch.device, handlers: Handlers) -> None:
        super().__init__(device, handlers)
        recipe = self.recipe
        self.layer_config = Float8Config(
            fp8_format=recipe.fp8_format,
            margin=recipe.margin,
            amax_history_len=recipe.amax_history_len,
            amax_compute_algo=recipe.amax_compute_algo,
            scaling=self.scaling,
            count_stats=True,
        )
        self.scalers = ScalerGroup({})
        self.skipped_steps = 0

    def convert_module(self, module: nn.Module) -> nn.Module:
        report = convert_linears(module, exclude_modules=self.recipe.exclude_modules, make_layer=self._make_layer)
        self._record_conversion(report)
        self.scalers = ScalerGroup({**self.scalers.scalers, **_scalers_of(module)})
        return module

    def _make_layer(self, linear: nn.Linear) -> Float8Linear:
        return Float8Linear.from_linear(linear, self.layer_config)

    def wrap_forward(self, forward: Forward) -> Forward:
        layers = list(float8_layers(forward.__self__).values())  # type: ignore[attr-defined]
        return FP8TrainingForward(forward, layers, self.recipe.use_autocast_during_eval)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> bool:
        overflow = bool(self.scalers.found_nonfinite())
        if not overflow:
            optimizer.step(closure) if closure is not None else optimizer.step()
        self.scalers.update()
        self.skipped_steps += overflow
        return not overflow

    def stats(self) -> dict[str, float]:
        return {"skipped_steps": self.skipped_steps}

    def fp8_stats(self) -> dict[str, dict[str, float]]:
        return {name: {k: float(v) for k, v in s.items()} for name, s in self.scalers.stats().items()}

    def state_dict(self) -> dict[str, Any]:
        return {"scaling": self.scalers.state_dict(), "skipped_steps": self.skipped_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scalers.load_state_dict(state["scaling"])
        self.skipped_steps = int(state["skipped_steps"])


def _scalers_of(model: nn.Module) -> dict[str, Any]:
    """Every scaler of `model`'s FP8 layers, named '<layer>.<role>'."""
    return {
        f"{name}.{role}": scaler
        for name, layer in float8_layers(model).items()
        for role, scaler in layer.scalers().items()
    }
