"""Float8Conv1D: transformers' Conv1D (GPT-2's linear layer) computing in FP8.

transformers.pytorch_utils.Conv1D is a Linear whose weight is stored transposed, (in, out):
``y = x @ weight + bias``. GPT-2 (and GPT, ...) compute every projection with it, so an FP8
backend that converts nn.Linear only leaves all of GPT-2 but its lm_head in high precision.

Float8Conv1D is a Float8Linear that keeps the Conv1D's own ``weight`` (in, out) and ``bias``
Parameter objects under their names (state dicts, checkpoints, optimizers and unwrapping
keep working) and its ``nf`` / ``nx`` attributes. Its GEMMs are a Float8Linear's: the cast to
FP8 writes the weight as (out, in), and the weight gradient comes out in the (in, out) layout
(functions.Float8LinearFunction with ``transposed=True``). transformers is not imported here.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from accel.backends.conversion import is_conv1d
from accel.backends.native_fp8.linear import Float8Config, Float8Linear


class Float8Conv1D(Float8Linear):
    """A transformers Conv1D computing in FP8; build it with :meth:`from_conv1d`."""

    transposed_weight = True
    nx: int
    nf: int

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError(
            "Float8Conv1D(...) cannot be built from sizes; use Float8Conv1D.from_conv1d(conv1d), which takes over "
            "a transformers Conv1D's Parameters"
        )

    @classmethod
    def from_conv1d(cls, conv1d: nn.Module, config: Float8Config | None = None) -> Float8Conv1D:
        """A Float8Conv1D holding ``conv1d``'s own ``weight`` (in, out) and ``bias`` Parameters.

        ``conv1d``'s hooks stay in effect, and :meth:`to_linear` gives ``conv1d`` back.
        """
        if not is_conv1d(conv1d):
            raise ValueError(
                f"conv1d={type(conv1d).__name__} is not supported; accepted: a transformers Conv1D "
                "(transformers.pytorch_utils.Conv1D, weight of shape (nx, nf))"
            )
        nx, nf = cast(torch.Tensor, conv1d.weight).shape  # is_conv1d checked: a 2-D tensor
        layer: Float8Conv1D = cls._take_over(conv1d, int(nx), int(nf), config)
        layer.nx, layer.nf = int(nx), int(nf)
        return layer

    def to_linear(self) -> nn.Module:  # type: ignore[override]  # gives back the Conv1D, which is not an nn.Linear
        """The transformers Conv1D this layer was made from, holding its current Parameters."""
        if "_replaced_linear" not in self.__dict__:
            raise RuntimeError("Float8Conv1D.to_linear() needs the Conv1D it was made from (use from_conv1d)")
        return super().to_linear()

    def extra_repr(self) -> str:
        return f"weight stored (in_features, out_features) as Conv1D's, {super().extra_repr()}"
