"""Options for automatic mixed precision: the GradScaler and torch.autocast."""

from __future__ import annotations

import math

from accel._validation import check_bool, check_int
from accel.kwargs_handlers.base import KwargsHandler, kwargs_handler


def _check_float(argument: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TypeError(f"{argument}={value!r} must be a finite number.")
    return float(value)


@kwargs_handler()
class GradScalerKwargs(KwargsHandler):
    """Options of the loss scaler used with fp16 mixed precision (torch.amp.GradScaler's own)."""

    init_scale: float = 65536.0
    """The loss scale of the first step; must be > 0."""
    growth_factor: float = 2.0
    """Multiplier applied after `growth_interval` steps without overflow; must be > 1."""
    backoff_factor: float = 0.5
    """Multiplier applied on a step with inf/NaN gradients; must be in (0, 1)."""
    growth_interval: int = 2000
    """Overflow-free steps between two growths; must be >= 1."""
    enabled: bool = True
    """False runs fp16 autocast without loss scaling (gradients may underflow)."""
    min_scale: float | None = None
    """accel only: the floor of the loss scale; None means 1.0 (or `init_scale` when lower).

    At a scale >= 1 unscaling only shrinks gradients, so torch's inf/NaN check (made before
    unscaling) is exact; below it the scale would reach 0.0 and let NaN into the weights."""
    max_consecutive_skips: int = 100
    """accel only: raise once this many optimizer steps in a row were skipped (inf/NaN gradients)
    with the scale at its floor, instead of training on without ever stepping."""

    @property
    def scale_floor(self) -> float:
        """The lowest loss scale: `min_scale`, or 1.0 capped at `init_scale` when not given."""
        return float(self.min_scale) if self.min_scale is not None else min(1.0, float(self.init_scale))

    def __post_init__(self) -> None:
        init_scale = _check_float("GradScalerKwargs.init_scale", self.init_scale)
        if init_scale <= 0:
            raise ValueError(f"GradScalerKwargs.init_scale={self.init_scale!r} must be > 0 (default 65536.0).")
        if _check_float("GradScalerKwargs.growth_factor", self.growth_factor) <= 1:
            raise ValueError(f"GradScalerKwargs.growth_factor={self.growth_factor!r} must be > 1 (default 2.0).")
        backoff = _check_float("GradScalerKwargs.backoff_factor", self.backoff_factor)
        if not 0 < backoff < 1:
            raise ValueError(
                f"GradScalerKwargs.backoff_factor={self.backoff_factor!r} must be in (0, 1) (default 0.5)."
            )
        check_int("GradScalerKwargs.growth_interval", self.growth_interval, minimum=1)
        check_bool("GradScalerKwargs.enabled", self.enabled)
        check_int("GradScalerKwargs.max_consecutive_skips", self.max_consecutive_skips, minimum=1)
        if self.min_scale is not None:
            floor = _check_float("GradScalerKwargs.min_scale", self.min_scale)
            if not 0 < floor <= init_scale:
                raise ValueError(
                    f"GradScalerKwargs.min_scale={self.min_scale!r} must be > 0 and <= init_scale={self.init_scale!r} "
                    "(default None: 1.0, or init_scale when lower)."
                )


@kwargs_handler()
class AutocastKwargs(KwargsHandler):
    """Options of torch.autocast, for the prepared model and for `Accelerator.autocast()`."""

    enabled: bool = True
    """False turns autocast off (for example inside `accelerator.autocast(AutocastKwargs(enabled=False))`)."""
    cache_enabled: bool | None = None
    """torch.autocast's weight-cast cache; None keeps torch's default."""
    convert_outputs_to_fp32: bool = True
    """Return the prepared model's 16-bit float outputs as fp32 (as Accelerate does); False keeps
    them 16-bit, which saves memory for large outputs such as a big vocabulary's logits."""

    def __post_init__(self) -> None:
        check_bool("AutocastKwargs.enabled", self.enabled)
        if self.cache_enabled is not None:
            check_bool("AutocastKwargs.cache_enabled", self.cache_enabled)
        check_bool("AutocastKwargs.convert_outputs_to_fp32", self.convert_outputs_to_fp32)
