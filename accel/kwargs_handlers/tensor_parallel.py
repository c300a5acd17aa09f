"""TorchTensorParallelPlugin and TorchTensorParallelConfig: Accelerate's tensor-parallel option objects.

Accelerate keeps `TorchTensorParallelPlugin(tp_size=...)` for older scripts (`Accelerator(torch_tp_plugin=...)`,
which it turns into `ParallelismConfig(tp_size=...)`) and `TorchTensorParallelConfig` for the options of
`ParallelismConfig(tp_handler=...)`. accel accepts both with Accelerate's fields; the layer plan itself comes
from the model (a transformers model's `tp_plan`) or from the user (accel.parallel.tensor_plan).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from accel._validation import check_bool, check_int


@dataclass
class TorchTensorParallelPlugin:
    """How many processes share each layer's weights (`tp_size`), Accelerate's deprecated spelling of
    `ParallelismConfig(tp_size=...)`.

    >>> TorchTensorParallelPlugin(tp_size=2).tp_size
    2
    """

    tp_size: int = 1
    """The size of the mesh's "tp" dimension: each planned layer's weight is split over this many processes."""
    torch_device_mesh: Any = field(default=None)
    """A torch DeviceMesh with a "tp" dimension to use instead of the one the Accelerator builds (None: built)."""

    def __post_init__(self) -> None:
        self.tp_size = check_int("TorchTensorParallelPlugin.tp_size", self.tp_size, minimum=1)
        mesh = self.torch_device_mesh
        if mesh is not None and "tp" not in (getattr(mesh, "mesh_dim_names", None) or ()):
            raise ValueError(
                f"TorchTensorParallelPlugin(torch_device_mesh={mesh!r}) has no 'tp' dimension; give a DeviceMesh built "
                "with mesh_dim_names including 'tp' (torch.distributed.device_mesh.init_device_mesh), or leave it None."
            )


@dataclass
class TorchTensorParallelConfig:
    """Options of tensor parallelism (Accelerate's `ParallelismConfig(tp_handler=...)`).

    `enable_async_tp=True` (overlapping the TP collectives with the matmuls) is refused rather than
    ignored with a warning as Accelerate does: neither runs it. `plan` is accel's: which layers to split
    for a model that carries no `tp_plan` of its own (transformers models do); given, it is used instead
    of the model's.

    >>> TorchTensorParallelConfig(plan={"blocks.*.up": "colwise", "blocks.*.down": "rowwise"}).enable_async_tp
    False
    """

    enable_async_tp: bool = False
    plan: dict[str, Any] | None = None
    """Module name (with `*` for one name part) -> style: "colwise", "rowwise", "colwise_rep", "rowwise_rep",
    "embedding_rowwise", "embedding_colwise", "replicate" (transformers' names), or a torch ParallelStyle object."""

    def __post_init__(self) -> None:
        if self.plan is not None:
            from accel.parallel.tensor_plan import check_plan  # torch: only where a plan is given

            self.plan = check_plan("TorchTensorParallelConfig.plan", self.plan)
        if check_bool("TorchTensorParallelConfig.enable_async_tp", self.enable_async_tp):
            raise ValueError(
                "TorchTensorParallelConfig(enable_async_tp=True): asynchronous tensor parallelism is not run by accel "
                "(Accelerate ignores it with a warning). Leave enable_async_tp=False; the layers still run tensor parallel."
            )
