"""fp8_params under FSDP2: each process keeps its weight shard in FP8, and the all-gather moves FP8.

FSDP2 lets the local shard of a parameter decide what is all-gathered: a tensor subclass with
``fsdp_pre_all_gather`` / ``fsdp_post_all_gather`` (torch/distributed/fsdp/_fully_shard/_fsdp_param.py).
:class:`ShardedMaster` is that subclass for a Float8Linear's weight: it holds the high-precision
master shard (what the optimizer steps and what checkpoints hold) and, through its
:class:`ShardCast`, the shard cast to FP8 once per change of the master (fp8_params). Before
the all-gather it hands FSDP the FP8 bytes (as uint8: gloo has no float8 dtypes, and FSDP2
gathers groups of mixed dtypes as uint8 anyway) and the scale; after it, FSDP's unsharded
weight is a :class:`GatheredFP8Weight`, which the layer's FP8 GEMMs take as they are.

The scale is per tensor, so it must be the same on every process: each process measures its
shard's amax and one all-reduce (MAX) of all the weights' amaxes gives each weight the amax of
the whole weight (:func:`cast_shards`, after every optimizer step; a single weight's own
all-reduce on the first all-gather and after loading). Casting is element-wise, so the
gathered FP8 weight is bit for bit the one a single process casts from the whole master.
Per-shard scales gathered along would need no all-reduce but give a weight several scales,
which a tensorwise GEMM cannot take and which would not match the one-process numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.utils._pytree as pytree
from torch import nn
from torch.distributed.tensor import DTensor

from accel.backends.native_fp8.data_parallel import max_over_processes
from accel.backends.native_fp8.fp8_weight import FP8Weight
from accel.backends.native_fp8.scaling import TensorScaler, tensor_amax

if TYPE_CHECKING:
    from accel.backends.native_fp8.linear import Float8Linear

aten = torch.ops.aten


class ShardCast(FP8Weight):
    """A weight shard in FP8 (``data``, this process's rows) and the inverse of the weight's scale."""

    def __init__(self, scaler: TensorScaler) -> None:
        super().__init__()
        self.scaler = scaler
        """The layer's weight scaler: its scale (delayed scaling) and the amax it records."""

    def cast(self, shard: torch.Tensor, amax: torch.Tensor) -> None:
        """Cast ``shard`` with the scale for ``amax``, the amax of the whole weight."""
        self.data, self.scale_inv = self.scaler.quantize_part(shard, amax)


_KEEP_MASTER = {
    aten.detach.default, aten.alias.default, aten.view.default, aten.slice.Tensor, aten.as_strided.default,
    aten.split.Tensor, aten.new_zeros.default, aten.empty_like.default, aten._to_copy.default,
    aten._pin_memory.default,
}
"""The ops through which FSDP2 makes, pads and moves the shard: their results stay ShardedMaster.
Everything else (the optimizer's arithmetic, clone, zeros_like for its state) gives plain tensors."""


class ShardedMaster(torch.Tensor):
    """A high-precision weight (or its shard) that FSDP2 all-gathers in FP8 (see the module docstring).

    Example::

        layer.weight = nn.Parameter(ShardedMaster(layer.weight.detach(), ShardCast(layer.weight_scaler)))
        fully_shard(layer)  # the forward's all-gather now moves one byte per weight value
    """

    _tensor: torch.Tensor
    shard_cast: ShardCast

    @staticmethod
    def __new__(cls, tensor: torch.Tensor, shard_cast: ShardCast) -> ShardedMaster:
        return torch.Tensor._make_wrapper_subclass(  # torch's subclass API
            cls, tensor.size(), strides=tensor.stride(), storage_offset=tensor.storage_offset(),
            dtype=tensor.dtype, layout=tensor.layout, device=tensor.device, requires_grad=tensor.requires_grad,
        )

    def __init__(self, tensor: torch.Tensor, shard_cast: ShardCast) -> None:
        self._tensor = tensor
        self.shard_cast = shard_cast

    def __repr__(self) -> str:  # type: ignore[override]  # torch.Tensor's takes keyword arguments
        return f"ShardedMaster({self._tensor!r})"

    @classmethod
    def __torch_dispatch__(  # type: ignore[override]  # torch declares it as a plain function
        cls, func: Any, types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        shard_cast: list[ShardCast] = []

        def unwrap(t: ShardedMaster) -> torch.Tensor:
            shard_cast.append(t.shard_cast)
            return t._tensor

        args, kwargs = pytree.tree_map_only(ShardedMaster, unwrap, (args, kwargs or {}))
        out = func(*args, **kwargs)
        if func not in _KEEP_MASTER:
            return out
        return pytree.tree_map_only(torch.Tensor, lambda t: ShardedMaster(t, shard_cast[0]), out)

    def __tensor_flatten__(self) -> tuple[list[str], dict[str, Any]]:
        return ["_tensor"], {"shard_cast": self.shard_cast}

    @staticmethod
    def __tensor_unflatten__(inner: dict[str, torch.Tensor], meta: dict[str, Any], size: Any, stride: Any) -> ShardedMaster:
        return ShardedMaster(inner["_tensor"], meta["shard_cast"])

    # ------------------------------------------------------------------ FSDP2's all-gather extension
    def fsdp_pre_all_gather(
        self, mesh: Any, outer_size: torch.Size, outer_stride: tuple[int, ...], module: nn.Module, mp_policy: Any,
    ) -> tuple[tuple[torch.Tensor, ...], Any]:
        """The shard's FP8 bytes (padded to FSDP's shard size) and, as metadata, the scale's inverse."""
        cast = self.shard_cast
        if cast.data is None:  # first all-gather, or the master was loaded: this weight's own all-reduce
            cast.cast(self._tensor, max_over_processes(tensor_amax(self._tensor)))
        assert cast.data is not None and cast.scale_inv is not None
        data = cast.data.to(self.device).view(torch.uint8)
        rows = -(-outer_size[0] // mesh.size())  # FSDP pads every shard to the first one's rows
        if data.shape[0] < rows:
            data = torch.cat((data, data.new_zeros(rows - data.shape[0], *data.shape[1:])))
        return (data,), cast.scale_inv.to(self.device)

    def fsdp_post_all_gather(
        self, outputs: tuple[torch.Tensor, ...], metadata: Any, param_dtype: torch.dtype, *,
        out: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]] | None:
        """The gathered bytes as a :class:`GatheredFP8Weight` in FSDP's compute dtype ``param_dtype``."""
        (data,) = outputs
        if out is not None:  # later all-gathers refill the same storage: only the scale is new
            out._scale_inv = metadata  # type: ignore[attr-defined]  # a GatheredFP8Weight, made below
            return None
        fp8 = data.view(self.shard_cast.scaler.dtype)
        return GatheredFP8Weight(fp8, metadata, param_dtype), (data,)


_KEEP_GATHERED = {aten.detach.default, aten.alias.default, aten.view.default, aten.as_strided.default}


class GatheredFP8Weight(torch.Tensor):
    """A whole weight as FSDP2 gathered it: FP8 values ``_data`` and the inverse of their scale.

    Its dtype is FSDP's compute dtype (the base precision's): autograd gives it a gradient in
    that dtype, which FSDP reduce-scatters. Float8Linear reads ``_data`` and ``_scale_inv``
    directly; any other use sees the dequantized values (a high-precision evaluation runs on
    the FP8-rounded weight: the master is sharded, and only FP8 was gathered).
    """

    _data: torch.Tensor
    _scale_inv: torch.Tensor
    in_place_refusal: ClassVar[str] = (
        "a weight FSDP2 all-gathered in FP8 (FP8RecipeKwargs(fp8_params=True)) cannot be changed in place: "
        "change the sharded master (the Parameter outside forward) instead"
    )

    @staticmethod
    def __new__(cls, data: torch.Tensor, scale_inv: torch.Tensor, dtype: torch.dtype) -> GatheredFP8Weight:
        return torch.Tensor._make_wrapper_subclass(  # torch's subclass API
            cls, data.size(), strides=data.stride(), storage_offset=data.storage_offset(), dtype=dtype,
            device=data.device, requires_grad=data.requires_grad,
        )

    def __init__(self, data: torch.Tensor, scale_inv: torch.Tensor, dtype: torch.dtype) -> None:
        self._data = data
        self._scale_inv = scale_inv

    def __repr__(self) -> str:  # type: ignore[override]  # torch.Tensor's takes keyword arguments
        return f"GatheredFP8Weight({self._data.dtype}, shape={tuple(self.shape)}, dtype={self.dtype})"

    def dequantize(self) -> torch.Tensor:
        """The FP8 values times the scale's inverse, in this tensor's dtype."""
        return (self._data.to(torch.float32) * self._scale_inv).to(self.dtype)

    def fp8_rows(self, transposed: bool) -> torch.Tensor:
        """The FP8 values as (out, in), row-major: what the GEMMs take (a copy for a transposed layout)."""
        return self._data.t().contiguous() if transposed else self._data

    @classmethod
    def __torch_dispatch__(  # type: ignore[override]  # torch declares it as a plain function
        cls, func: Any, types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        if func in _KEEP_GATHERED:
            first = args[0]
            data = func(first._data, *args[1:], **kwargs)
            return GatheredFP8Weight(data, first._scale_inv, first.dtype)
        if func._schema.is_mutable:
            raise RuntimeError(cls.in_place_refusal)
        args, kwargs = pytree.tree_map_only(GatheredFP8Weight, GatheredFP8Weight.dequantize, (args, kwargs))
        return func(*args, **kwargs)

    def __tensor_flatten__(self) -> tuple[list[str], dict[str, Any]]:
        return ["_data", "_scale_inv"], {"dtype": self.dtype}

    @staticmethod
    def __tensor_unflatten__(inner: dict[str, torch.Tensor], meta: dict[str, Any], size: Any, stride: Any) -> GatheredFP8Weight:
        return GatheredFP8Weight(inner["_data"], inner["_scale_inv"], meta["dtype"])


# ---------------------------------------------------------------------- what the backend calls
def gather_in_fp8(layer: Float8Linear, scaler: TensorScaler) -> ShardCast:
    """Make ``layer.weight`` a :class:`ShardedMaster` (a new Parameter of the same values and name),
    before fully_shard; returns its :class:`ShardCast`, which the layer keeps as ``fp8_weight``."""
    weight = layer.weight
    shard_cast = ShardCast(scaler)
    layer.weight = nn.Parameter(ShardedMaster(weight.detach(), shard_cast), requires_grad=weight.requires_grad)
    return shard_cast


def master_shard(weight: torch.Tensor) -> ShardedMaster | None:
    """The ShardedMaster under a sharded weight Parameter; None while unsharded (or not gathered in FP8)."""
    local = weight._local_tensor if isinstance(weight, DTensor) else weight
    return local if isinstance(local, ShardedMaster) else None


def cast_shards(layers: Sequence[Float8Linear]) -> None:
    """Cast the sharded master weight of every layer in ``layers`` (made by :func:`gather_in_fp8`) to
    FP8, with one all-reduce of their amaxes.

    After an optimizer step that changed them (every process calls it, in the same order). A
    weight that is not sharded now (FSDP holds it gathered) is cast at its next all-gather instead.
    """
    shards = []
    for layer in layers:
        shard = master_shard(layer.weight)
        if shard is None:
            if layer.fp8_weight is not None:
                layer.fp8_weight.invalidate()
        else:
            shards.append(shard)
    if not shards:
        return
    amaxes = max_over_processes(torch.stack([tensor_amax(shard._tensor) for shard in shards]))
    for shard, amax in zip(shards, amaxes.unbind()):
        shard.shard_cast.cast(shard._tensor, amax)


def plain_master(value: torch.Tensor) -> torch.Tensor:
    """``value`` with a ShardedMaster inside made a plain tensor (same storage), for state dicts:
    checkpoints hold the high-precision master as an ordinary tensor."""
    if isinstance(value, DTensor) and isinstance(value._local_tensor, ShardedMaster):
        return DTensor.from_local(
            value._local_tensor._tensor, value.device_mesh, value.placements, run_check=False,
            shape=value.shape, stride=value.stride(),
        )
    return value._tensor if isinstance(value, ShardedMaster) else value
