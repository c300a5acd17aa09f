"""HalfWeight: one Parameter of a converted layer, stored in float16: its real values, rounded.

Between optimizer steps ``param.data`` is float16 holding the parameter's values, two bytes per
value. They are the real values (no scale): anything that reads the parameter (an EMA of
``model.parameters()``, weight-norm logging, copying into an evaluation model, a hand-written
weight decay) reads the value within float16's rounding, and what it writes is what the layer
uses. ``scale_inv`` is kept for the kernels, which take a storage scale; it is always 1. The
Parameter object stays the same, so optimizers and hooks that hold it keep working.

An earlier version scaled each tensor by a power of two, putting its amax near 2**15; for
values in float16's normal range (magnitudes 6.1e-5 to 65504) that changes nothing in the
rounding, it only kept values below 6.1e-5 out of the subnormals, and it made every read of the
parameter wrong by that factor. Unscaled, values below 2**-14 are float16 subnormals (absolute
spacing 2**-24, about 6e-8), and values beyond 65504 cannot be stored: :func:`check_storable`
refuses them when the layer is converted.

For the few moments when something needs real values in ``param.data`` (gradient clipping,
an O1 optimizer step) :meth:`HalfWeight.materialise` swaps in a float32 copy and keeps the
storage aside; :meth:`HalfWeight.store` rounds the (updated) float32 values back,
stochastically, and :meth:`HalfWeight.restore` puts the untouched storage back (a skipped
step). ``data_scale_inv`` is always the factor that turns ``param.data`` into real values:
``scale_inv`` while stored, 1 while materialised.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from accel.backends.native_fp8 import fused
from accel.backends.native_fp8.rounding import half_to_float, round_to_half

STORAGE_DTYPE: torch.dtype = torch.float16
STORAGE_MAX = torch.finfo(STORAGE_DTYPE).max
"""The largest magnitude float16 storage holds (65504)."""


def check_storable(layer: str, params: Iterable[tuple[str, torch.Tensor]], level: str) -> None:
    """Raise if a parameter of ``layer`` holds a value float16 cannot store (beyond 65504, or not finite).

    Called once per layer when O1/O2 storage is made (one device sync per layer, at prepare).
    """
    for name, param in params:
        if param.device.type == "meta" or param.numel() == 0:
            continue
        amax = float(param.detach().abs().amax())
        if not amax <= STORAGE_MAX:
            raise ValueError(
                f"FP8RecipeKwargs(optimization_level={level!r}) stores {layer}.{name} in float16, whose largest "
                f"value is {STORAGE_MAX:g}, but it holds a value of magnitude {amax:g}. Keep the layer in high "
                f"precision (FP8RecipeKwargs(exclude_modules=[{layer!r}])) or leave optimization_level out (the "
                "parameters then stay as they are)."
            )


class HalfWeight:
    """The float16 storage of one Parameter, with its scale."""

    def __init__(self, param: torch.Tensor) -> None:
        self.param = param
        self.high_precision_dtype = param.dtype
        """The dtype the parameter had before (what state dicts give back)."""
        self._one = torch.ones((), dtype=torch.float32, device=param.device)
        self._stored: torch.Tensor | None = None
        with torch.no_grad():
            self.scale_inv, self.param.data = self.encode(param.detach().to(torch.float32, copy=True), None)
        self.data_scale_inv = self.scale_inv

    @property
    def materialised(self) -> bool:
        """True while ``param.data`` holds float32 real values (between materialise and store/restore)."""
        return self._stored is not None

    @staticmethod
    def encode(value: torch.Tensor, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(scale_inv, float16 storage)`` of float32 ``value`` (overwritten; pass a copy to keep it);
        ``scale_inv`` is 1. Stochastic rounding on the CPU runs as one fused kernel (fused.py), with the same bits."""
        if generator is not None and fused.supports(value) and value.dtype == torch.float32:
            stored, scale_inv = fused.to_half_stochastic(value, generator)
            return scale_inv, stored
        return torch.ones((), dtype=torch.float32, device=value.device), round_to_half(value, generator)

    def value(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The real values, as a new tensor in ``dtype`` (a copy even while materialised)."""
        data = self.param.detach()
        if self.materialised:
            return data.to(dtype, copy=True)
        return half_to_float(data, self.scale_inv).to(dtype)

    def working_copy(self) -> torch.Tensor:
        """float32 real values for the caller to update and hand to :meth:`store_value`:
        the materialised tensor itself, or a fresh upcast of the storage."""
        if self.materialised:
            return self.param.data
        return half_to_float(self.param.data, self.scale_inv)

    def materialise(self) -> None:
        """Put float32 real values into ``param.data``, keeping the storage aside. Idempotent."""
        if self.materialised:
            return
        self._stored = self.param.data
        self.param.data = half_to_float(self._stored, self.scale_inv)
        self.data_scale_inv = self._one

    def store(self, generator: torch.Generator | None) -> None:
        """Round the materialised float32 values (as updated) back into storage, with a fresh scale."""
        if not self.materialised:
            raise RuntimeError("HalfWeight.store() needs materialise() first")
        self.scale_inv, self.param.data = self.encode(self.param.data, generator)
        self._stored = None
        self.data_scale_inv = self.scale_inv

    def store_value(self, value: torch.Tensor, generator: torch.Generator | None) -> None:
        """Store float32 ``value`` (overwritten) as the new real values."""
        self.store_encoded(*reversed(self.encode(value, generator)))

    def store_encoded(self, stored: torch.Tensor, scale_inv: torch.Tensor) -> None:
        """Take ``stored`` (float16, the parameter's shape) with ``scale_inv`` as the new storage."""
        self.param.data = stored
        self.scale_inv = scale_inv
        self._stored = None
        self.data_scale_inv = self.scale_inv

    def restore(self) -> None:
        """Undo :meth:`materialise` without rounding: the storage as it was. Idempotent."""
        if self._stored is None:
            return
        self.param.data = self._stored
        self._stored = None
        self.data_scale_inv = self.scale_inv

    def load(self, value: torch.Tensor) -> torch.Tensor:
        """Set the scale for real values ``value`` and return their storage, for ``param.copy_``.

        Rounds to nearest: values that came out of this storage come back bit for bit.
        """
        self.restore()
        self.scale_inv, stored = self.encode(value.detach().to(self.param.device, torch.float32, copy=True), None)
        self.data_scale_inv = self.scale_inv
        return stored

    def keep_storage_dtype(self) -> None:
        """After a module-wide cast (``model.float()``), cast the storage back; its values are kept."""
        if not self.materialised and self.param.dtype != STORAGE_DTYPE:
            self.param.data = self.param.data.to(STORAGE_DTYPE)
        self.scale_inv = self.scale_inv.to(self.param.device)
        self._one = self._one.to(self.param.device)
        self.data_scale_inv = self._one if self.materialised else self.scale_inv

    def release(self) -> None:
        """Put real values back into ``param.data`` in the original dtype, for good (unconverting)."""
        self.param.data = self.value(self.high_precision_dtype)
        self._stored = None
