"""FP8 weights between optimizer steps (FP8RecipeKwargs(fp8_params=True)).

TransformerEngine's `fp8_model_init` and NeMo's `fp8_params` keep a module's weights in FP8,
with the high-precision master copy where the optimizer keeps it. In the native backend the
master is the weight Parameter the optimizer steps (float16 with a scale under O1/O2); the
layer keeps its weight in FP8 (E4M3, one byte per value, with a per-tensor scale) and runs
every GEMM from it. The FP8 weight is made from the master once, at the first forward after
the master changed (an optimizer step, a loaded state dict, a move to another device), with
the weight scaler of the layer: with one forward per step the numbers are those of casting
the weight at every forward, and further forwards in the step (gradient accumulation,
evaluation with FP8) reuse it.
"""

from __future__ import annotations

import torch

from accel.backends.native_fp8.scaling import TensorScaler


class FP8Weight:
    """A layer's weight in FP8 and the inverse of its scale, remade after the master changes."""

    def __init__(self) -> None:
        self.data: torch.Tensor | None = None
        """The weight in FP8 (None until the first forward after a change)."""
        self.scale_inv: torch.Tensor | None = None

    def get(
        self, weight: torch.Tensor, scaler: TensorScaler, weight_scale_inv: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(weight in FP8, scale_inv)``: kept from the last cast, or cast now from the master ``weight``."""
        if self.data is None or self.scale_inv is None:
            self.data, self.scale_inv = scaler.quantize(weight, weight_scale_inv)
        return self.data, self.scale_inv

    def invalidate(self) -> None:
        """The master changed: the next forward casts it again (the old FP8 weight is freed)."""
        self.data = self.scale_inv = None

    @property
    def nbytes(self) -> int:
        """Bytes held now (the FP8 values and the scale)."""
        return sum(t.numel() * t.element_size() for t in (self.data, self.scale_inv) if t is not None)
