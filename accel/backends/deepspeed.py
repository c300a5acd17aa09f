"""The precision under DeepSpeed: DeepSpeed's engine runs it, this backend only names it and writes its config.

DeepSpeed's "bf16"/"fp16" keep the model's weights in 16 bits with float32 masters inside its optimizer
(fp16 with dynamic loss scaling); no torch.autocast runs (as under Accelerate: `native_amp` is False).
`accelerator.mixed_precision` reports that name. Precisions DeepSpeed cannot run from accel are refused
here, at construction, with the reason.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from accel.backends.full import FullPrecision
from accel.backends.names import canonical_precision
from accel.kwargs_handlers import GradScalerKwargs, Handlers

_SECTION = {"fp16": "fp16", "bf16": "bf16"}
"""accel's precision name -> DeepSpeed's config section that runs it ('no' has none)."""
REFUSED = {
    "fp8": "FP8 layers (Transformer Engine, torchao, MS-AMP) are swapped into the model by accel's FP8 backends, "
    "which DeepSpeed's engine does not drive (its optimizer keeps its own 16-bit copies); train FP8 with DDP or "
    "FSDP2, or DeepSpeed with mixed_precision='bf16'",
    "16-true": "DeepSpeed's fp16 keeps float32 masters (mixed_precision='fp16'); it has no pure-16-bit mode",
    "bf16-true": "DeepSpeed's bf16 keeps float32 masters (mixed_precision='bf16'); it has no pure-16-bit mode",
    "64-true": "DeepSpeed's ZeRO optimizers run float32 or 16-bit weights, not float64",
}


class DeepSpeedPrecision(FullPrecision):
    """'no', 'fp16' or 'bf16' as DeepSpeed runs them; the model is left as it is (the engine converts it)."""

    handler_types: ClassVar[tuple[type, ...]] = (GradScalerKwargs,)

    def __init__(self, name: str, device: torch.device, handlers: Handlers) -> None:
        super().__init__(device, handlers)
        self.name = name  # type: ignore[misc]  # per instance: the engine's precision
        if handlers.has(GradScalerKwargs) and name != "fp16":
            raise ValueError(f"kwarg_handlers has GradScalerKwargs, but DeepSpeed runs mixed_precision={name!r}, "
                             "which scales no loss. Remove it, or use mixed_precision='fp16'.")

    def describe(self) -> str:
        return "fp32 (DeepSpeed, no mixed precision)" if self.name == "no" else f"{self.name} (DeepSpeed's engine)"

    def config_sections(self) -> dict[str, Any]:
        """The DeepSpeed config's precision sections: {"bf16": {"enabled": True}}, ... ({} for 'no')."""
        sections: dict[str, Any] = {key: {"enabled": False} for key in _SECTION.values()}
        if self.name in _SECTION:
            sections[_SECTION[self.name]] = {"enabled": True, **self._loss_scaling()}
        return sections

    def _loss_scaling(self) -> dict[str, Any]:
        """fp16's dynamic loss scale from GradScalerKwargs (DeepSpeed doubles and halves it: only these factors)."""
        if self.name != "fp16" or not self.handlers.has(GradScalerKwargs):
            return {}
        scaler = self.handlers.get(GradScalerKwargs)
        power = math.log2(scaler.init_scale) if scaler.init_scale > 0 else -1.0
        if scaler.growth_factor != 2.0 or scaler.backoff_factor != 0.5 or power != int(power) or not scaler.enabled:
            raise ValueError(
                f"GradScalerKwargs({scaler}) under DeepSpeed: its fp16 loss scale starts at a power of 2, doubles and "
                "halves, and is always on. Give init_scale=2**k, growth_factor=2.0, backoff_factor=0.5, enabled=True."
            )
        options = {"loss_scale": 0, "initial_scale_power": int(power), "loss_scale_window": scaler.growth_interval}
        return options | ({"min_loss_scale": scaler.min_scale} if scaler.min_scale is not None else {})

    def config_disagreement(self, config: dict[str, Any]) -> str | None:
        """What a DeepSpeed config's own precision sections say against this precision, or None."""
        enabled = [key for key in _SECTION.values() if isinstance(config.get(key), dict)
                   and config[key].get("enabled") not in (False, "auto")]
        ours = _SECTION.get(self.name)
        if enabled and enabled != [ours]:
            return f"the DeepSpeed config enables {' and '.join(enabled)}, the Accelerator runs mixed_precision={self.name!r}"
        return None


def deepspeed_precision(name: str, device: torch.device, handlers: Handlers) -> DeepSpeedPrecision:
    """The backend for precision `name` (resolved) under DeepSpeed, or ValueError with the reason it cannot run."""
    canonical = canonical_precision(name)
    if canonical in REFUSED:
        raise ValueError(f"mixed_precision={name!r} with a DeepSpeedPlugin: {REFUSED[canonical]}.")
    return DeepSpeedPrecision(canonical, device, handlers)


def overflow_flag_all_reduced(name: str, stage: int) -> bool:
    """Whether DeepSpeed 0.19's ZeRO optimizer all-reduces a one-byte overflow flag each step under precision
    `name`: fp16 (its loss scaler) at every stage, and bf16 under stages 1-2, whose optimizer checks the
    gradients for inf/nan too (stage 3's bf16 does not). Read from DeepSpeed's source; measured on gloo
    (tests/estimate/test_communication_zero_tp.py)."""
    return name in _SECTION and (name == "fp16" or stage < 3)
