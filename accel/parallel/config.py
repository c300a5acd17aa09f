"""ParallelismConfig: how the processes are laid out as a device mesh, in Accelerate's names and fields.

`dp_replicate_size * dp_shard_size * tp_size * cp_size * sp_size` processes form one torch DeviceMesh with
Accelerate's dimension names (dp_replicate, dp_shard, cp, sp, tp, outermost first; only sizes > 1 get a
dimension) and its flattened ones (dp, dp_shard_cp, dp_cp). With FSDP2, dp_shard_size > 1 shards
the model; dp_replicate_size > 1 as well gives HSDP (each shard group's model replicated across
groups). tp_size > 1 splits layers over the tp dimension. sp_size > 1 splits each sequence over the sp
dimension (Ulysses: sp_backend "torch", accel.parallel.sequence; docs/long-context.md). cp_size > 1 is torch's
context parallelism (accel.parallel.context), on CUDA only: refused elsewhere when the Accelerator is built.
DeepSpeed's Ulysses (sp_backend "deepspeed") runs inside DeepSpeed's engine (accel.deepspeed.ulysses).

A size left as None is read from ACCEL_PARALLELISM_CONFIG_<FIELD> (set by `accel launch`), else
Accelerate's PARALLELISM_CONFIG_<FIELD> (set by `accelerate launch`), else 1, as Accelerate's does.
Torch-free: `accel launch` checks the sizes before it starts any process.

    from accel import Accelerator, FullyShardedDataParallelPlugin, ParallelismConfig

    accelerator = Accelerator(
        parallelism_config=ParallelismConfig(dp_replicate_size=2, dp_shard_size=4),  # HSDP on 8 processes
        fsdp_plugin=FullyShardedDataParallelPlugin(),
    )
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from accel._validation import check_choice, check_int
from accel.parallel.names import MESH_ORDER

CP_REASON = (
    "context parallelism (cp_size > 1) runs on CUDA only: torch's context_parallel shards the sequence of "
    "scaled_dot_product_attention and runs ring attention only on its CUDA flash/efficient attention kernels (torch "
    "has no sharding rule for the CPU kernel). Use sp_size instead (sequence parallelism: it splits the sequence too, "
    "on any device; docs/long-context.md), or cp_size=1"
)
SP_REASON = (
    "sp_backend='deepspeed' is DeepSpeed's Ulysses, which runs inside DeepSpeed's engine with its own process groups: "
    "pass a DeepSpeedPlugin (accel launch --use_deepspeed), or use sp_backend='torch' (accel's Ulysses: the same "
    "all-to-all around attention, with DDP or FSDP2)"
)



@dataclasses.dataclass
class ParallelismConfig:
    """The sizes of the device mesh's dimensions; every value checked here (module docstring).

    >>> config = ParallelismConfig(dp_replicate_size=2, dp_shard_size=2)
    >>> config.total_size, config.fsdp_dim_names, config.active_mesh_dims
    (4, ['dp_replicate', 'dp_shard_cp'], ['dp_replicate', 'dp_shard'])
    """

    dp_replicate_size: int | None = None
    """Replicas of the (sharded) model; with dp_shard_size == 1 it is DDP."""
    dp_shard_size: int | None = None
    """Processes over which FSDP2 shards each parameter (needs an FSDP plugin when > 1)."""
    tp_size: int | None = None
    """Processes over which tensor parallelism splits each layer (they see the same batch)."""
    cp_size: int | None = None
    """Processes over which torch's context_parallel splits each sequence (ring attention; CUDA only: CP_REASON)."""
    cp_backend: str | None = None
    """Accelerate's context-parallel backend: 'torch' only."""
    sp_size: int | None = None
    """Processes over which each sequence is split (Ulysses); they see the same batch, each a slice of it."""
    sp_backend: str | None = None
    """'torch' (accel's Ulysses, the default here) or 'deepspeed' (Accelerate's default: DeepSpeed's, with a DeepSpeedPlugin)."""
    tp_handler: Any = None
    """A TorchTensorParallelConfig (options of tensor parallelism: accel's `plan`), or None for its defaults."""
    cp_handler: Any = None
    """A TorchContextParallelConfig (cp_comm_strategy), or None for its defaults; only with cp_size > 1."""
    sp_handler: Any = None
    """A DeepSpeedSequenceParallelConfig, for sp_backend 'deepspeed' only (None: its defaults)."""

    device_mesh: Any = dataclasses.field(default=None, init=False, repr=False, compare=False)
    """The mesh, once built (`get_device_mesh`); shared by the Accelerator as `torch_device_mesh`."""

    def __post_init__(self) -> None:
        from accel.settings import PARALLELISM_SIZE_SETTINGS, SP_BACKEND, SP_BACKENDS

        for setting in PARALLELISM_SIZE_SETTINGS:
            value = getattr(self, setting.keyword)
            value = setting.from_env() if value is None else value
            setattr(self, setting.keyword, check_int(f"ParallelismConfig.{setting.keyword}", 1 if value is None else value,
                                                     minimum=1))
        # Accelerate's launcher sets this too; it has no accel setting (one value is accepted)
        cp_backend = self.cp_backend or os.environ.get("PARALLELISM_CONFIG_CP_BACKEND", "torch")
        self.cp_backend = check_choice("ParallelismConfig.cp_backend", cp_backend, ("torch",))
        sp_backend = self.sp_backend if self.sp_backend is not None else SP_BACKEND.from_env()
        self.sp_backend = check_choice("ParallelismConfig.sp_backend", sp_backend or "torch", SP_BACKENDS)
        self._refuse_unprovided()
        from accel.kwargs_handlers.tensor_parallel import TorchTensorParallelConfig

        if self.tp_handler is not None and not isinstance(self.tp_handler, TorchTensorParallelConfig):
            raise TypeError(
                f"ParallelismConfig(tp_handler={self.tp_handler!r}): give a TorchTensorParallelConfig "
                "(from accel.utils import TorchTensorParallelConfig), or None for its defaults."
            )
        if self.tp_handler is not None and self.sizes["tp"] == 1:
            raise ValueError(
                f"ParallelismConfig(tp_handler={self.tp_handler!r}) with tp_size=1: the handler configures tensor "
                "parallelism, which tp_size=1 does not use, so it would be ignored. Give tp_size > 1, or leave it out."
            )
        sizes = self.sizes
        if sizes["tp"] > 1 and sizes["dp_replicate"] > 1 and sizes["dp_shard"] == 1:
            raise ValueError(
                f"ParallelismConfig(tp_size={sizes['tp']}, dp_replicate_size={sizes['dp_replicate']}, dp_shard_size=1): "
                "tensor parallelism does not compose with pure data parallelism (DDP) in torch. Give the data-parallel "
                f"processes as dp_shard_size={sizes['dp_replicate']} (FSDP2 + TP), or dp_shard_size > 1 as well (HSDP + TP)."
            )

    def _refuse_unprovided(self) -> None:
        """DeepSpeed's sequence parallelism cannot run here (NotImplementedError with the reason); the handlers must
        be their own kind and have a size to configure; cp and sp cannot both split the sequence."""
        if self.cp_handler is not None:
            from accel.kwargs_handlers.context_parallel import TorchContextParallelConfig

            if not isinstance(self.cp_handler, TorchContextParallelConfig) or self.sizes["cp"] == 1:
                raise ValueError(
                    f"ParallelismConfig(cp_handler={self.cp_handler!r}, cp_size={self.cp_size}): give a "
                    "TorchContextParallelConfig (from accel.utils import TorchContextParallelConfig) with cp_size > 1."
                )
        if self.sizes["cp"] > 1 and self.sizes["sp"] > 1:
            raise ValueError(f"ParallelismConfig(cp_size={self.cp_size}, sp_size={self.sp_size}): context and sequence "
                             "parallelism both split the sequence; give one of them (sp_size runs on any device).")
        if self.sp_handler is not None:
            from accel.kwargs_handlers.sequence_parallel import DeepSpeedSequenceParallelConfig

            if not isinstance(self.sp_handler, DeepSpeedSequenceParallelConfig) or not self.deepspeed_ulysses:
                raise ValueError(
                    f"ParallelismConfig(sp_handler={self.sp_handler!r}, sp_size={self.sp_size}, sp_backend="
                    f"{self.sp_backend!r}): the handler configures DeepSpeed's Ulysses; give a "
                    "DeepSpeedSequenceParallelConfig with sp_size > 1 and sp_backend='deepspeed' (the torch backend has none)."
                )
        if self.deepspeed_ulysses and (self.sizes["tp"] > 1 or self.sizes["cp"] > 1):
            raise ValueError(f"ParallelismConfig(sp_backend='deepspeed', sp_size={self.sp_size}): DeepSpeed's Ulysses "
                             "lays out its own groups; give tp_size and cp_size 1 (the other processes are data parallel).")
        if self.sizes["sp"] > 1 and self.sizes["tp"] > 1:
            raise NotImplementedError(
                f"ParallelismConfig(sp_size={self.sp_size}, tp_size={self.tp_size}): sequence parallelism exchanges each "
                "layer's attention heads over the sp ranks, and tensor parallelism splits those heads over the tp ranks; "
                "accel does not compose the two. Give sp_size or tp_size, with dp_shard_size (FSDP2) for the rest."
            )

    def __repr__(self) -> str:
        sizes = ", ".join(f"{name}_size={self.sizes[name]}" for name in ("dp_replicate", "dp_shard", "tp", "cp", "sp"))
        return f"ParallelismConfig({sizes}, total_size={self.total_size})"

    def to_json(self) -> dict[str, Any]:
        """The fields as plain values (handlers as their field dicts; the mesh left out)."""
        return {field.name: _plain(getattr(self, field.name)) for field in dataclasses.fields(self) if field.init}

    # ----------------------------------------------------------------- Accelerate's views
    @property
    def sizes(self) -> dict[str, int]:
        """Dimension name -> size, for every dimension (enabled or not)."""
        return {"dp_replicate": self.dp_replicate_size or 1, "dp_shard": self.dp_shard_size or 1,
                "tp": self.tp_size or 1, "cp": self.cp_size or 1, "sp": self.sp_size or 1}

    @property
    def dp_replicate_enabled(self) -> bool:
        """True when dp_replicate_size > 1: the model is replicated over that dimension (DDP, or HSDP's replicas)."""
        return self.sizes["dp_replicate"] > 1

    @property
    def dp_shard_enabled(self) -> bool:
        """True when dp_shard_size > 1: FSDP2 shards the model over that dimension."""
        return self.sizes["dp_shard"] > 1

    @property
    def tp_enabled(self) -> bool:
        """True when tp_size > 1: tensor parallelism."""
        return self.sizes["tp"] > 1

    @property
    def cp_enabled(self) -> bool:
        """True when cp_size > 1: torch's context parallelism over the cp dimension (CUDA only)."""
        return self.sizes["cp"] > 1

    @property
    def sp_enabled(self) -> bool:
        """True when sp_size > 1: each sequence is split over the sp dimension (Ulysses)."""
        return self.sizes["sp"] > 1

    @property
    def deepspeed_ulysses(self) -> bool:
        """True for DeepSpeed's sequence parallelism (sp_size > 1, sp_backend 'deepspeed'): DeepSpeed makes its own
        groups, so no device mesh is built and the data-parallel processes are the rest of the world."""
        return self.sizes["sp"] > 1 and self.sp_backend == "deepspeed"

    @property
    def dp_dim_names(self) -> list[str]:
        """Enabled dimensions across which the data is split."""
        return [name for name in ("dp_replicate", "dp_shard") if self.sizes[name] > 1]

    @property
    def non_dp_dim_names(self) -> list[str]:
        """Enabled dimensions whose ranks see the same batch."""
        return [name for name in ("tp", "cp", "sp") if self.sizes[name] > 1]

    @property
    def dp_shard_cp_dim_names(self) -> list[str]:
        """Enabled dimensions flattened into `dp_shard_cp`, across which FSDP shards. Sequence ranks hold slices
        of the same batch, so their gradients are parts of one: FSDP2's reduction over this dimension adds them."""
        return [name for name in ("dp_shard", "cp", "sp") if self.sizes[name] > 1]

    @property
    def dp_cp_dim_names(self) -> list[str]:
        """Enabled dimensions flattened into `dp_cp`, across which the loss is averaged."""
        return [name for name in ("dp_replicate", "dp_shard", "cp", "sp") if self.sizes[name] > 1]

    @property
    def fsdp_dim_names(self) -> list[str]:
        """The mesh dimensions fully_shard gets: (dp_replicate,) dp_shard_cp; two of them is HSDP."""
        return ["dp_replicate", "dp_shard_cp"] if self.dp_replicate_enabled else ["dp_shard_cp"]

    @property
    def active_mesh_dims(self) -> list[str]:
        """The enabled dimensions: the data-parallel ones, then the others."""
        return self.dp_dim_names + self.non_dp_dim_names

    @property
    def total_size(self) -> int:
        """The processes the layout needs: the product of all sizes."""
        product = 1
        for size in self.sizes.values():
            product *= size
        return product

    @property
    def data_parallel_size(self) -> int:
        """Processes that see different batches: dp_replicate_size * dp_shard_size."""
        return self.sizes["dp_replicate"] * self.sizes["dp_shard"]

    @property
    def non_data_parallel_size(self) -> int:
        """Processes that see the same batch: tp_size * cp_size * sp_size."""
        return self.sizes["tp"] * self.sizes["cp"] * self.sizes["sp"]

    def mesh_layout(self) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """(dimension names, sizes) of the mesh in Accelerate's order; empty tuples when no size exceeds 1."""
        names = tuple(name for name in MESH_ORDER if name in self.active_mesh_dims)
        return names, tuple(self.sizes[name] for name in names)

    # ----------------------------------------------------------------- the mesh
    def build_device_mesh(self, device_type: str) -> Any:
        """A new DeviceMesh for `device_type` with the flattened dimensions (None when every size is 1).

        Args:
            device_type: The device type of the mesh (`"cuda"`, `"cpu"`, ...).
        """
        from accel.parallel.mesh import build_device_mesh

        return build_device_mesh(self, device_type)

    def get_device_mesh(self, device_type: str | None = None) -> Any:
        """The mesh, built on the first call (which needs `device_type`).

        Args:
            device_type: The device type to build the mesh for; may be None once it is built (a different
                type from the built mesh's raises).
        """
        if self.device_mesh is None:
            if device_type is None:
                raise ValueError("ParallelismConfig.get_device_mesh(): give a device_type (such as 'cuda' or 'cpu') to build it.")
            self.device_mesh = self.build_device_mesh(device_type)
        elif device_type is not None and self.device_mesh.device_type != device_type:
            raise ValueError(
                f"ParallelismConfig.get_device_mesh({device_type!r}): the mesh was built for {self.device_mesh.device_type!r}; "
                "build a new ParallelismConfig for another device type."
            )
        return self.device_mesh

    def with_sizes(self, **sizes: int) -> ParallelismConfig:
        """A copy with other sizes (the handlers kept), checked again.

        Args:
            **sizes: Size fields to replace (`dp_shard_size=4`, ...).
        """
        fields = {field.name: getattr(self, field.name) for field in dataclasses.fields(self) if field.init}
        return ParallelismConfig(**{**fields, **sizes})


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value



def check_world(sizes: Mapping[str, int], world: int, *, fsdp: bool, where: str = "ParallelismConfig") -> None:
    """Refuse sizes that do not fit `world` processes, or shard without FSDP (ValueError naming each size).

    `sizes`: field name -> size (absent: 1). All sizes 1 means "the whole world" and always fits, and so does
    sp_size without data-parallel sizes when it divides the world (the rest is data parallel; see
    accel.parallel.layout). Used by the Accelerator and, before any process starts, by `accel launch`.
    """
    given = {name: int(sizes.get(name) or 1) for name in ("dp_replicate_size", "dp_shard_size", "tp_size", "cp_size", "sp_size")}
    product = 1
    for size in given.values():
        product *= size
    if given["sp_size"] > 1 and given["dp_replicate_size"] * given["dp_shard_size"] == 1 and world % product == 0:
        product = world  # the rest of the world is data parallel (accel.parallel.layout fills it)
    if product != 1 and product != world:
        listed = " * ".join(f"{name}={size}" for name, size in given.items())
        raise ValueError(
            f"{where}: {listed} = {product} processes, but the world size (num_processes) is {world}. Give sizes "
            f"whose product is {world}, or launch {product} processes (accel launch --num_processes {product})."
        )
    if given["dp_shard_size"] > 1 and not fsdp:
        raise ValueError(
            f"{where}: dp_shard_size={given['dp_shard_size']} shards the model with FSDP2, but FSDP is not on. Pass "
            "fsdp_plugin=FullyShardedDataParallelPlugin() (accel launch --use_fsdp, or distributed_type: FSDP), or use "
            "dp_replicate_size alone for DDP."
        )
    if given["tp_size"] > 1 and given["dp_replicate_size"] > 1 and given["dp_shard_size"] == 1:
        raise ValueError(
            f"{where}: tp_size={given['tp_size']} with dp_replicate_size={given['dp_replicate_size']} and dp_shard_size=1: "
            "tensor parallelism does not compose with pure data parallelism (DDP) in torch. Give the data-parallel "
            f"processes as dp_shard_size={given['dp_replicate_size']} with FSDP (FSDP2 + TP), or dp_shard_size > 1 as "
            "well (HSDP + TP)."
        )
