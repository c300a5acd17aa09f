"""Accelerate's views of the device mesh on the Accelerator: this process's rank in each dimension."""

from __future__ import annotations

from typing import Any


class ParallelViewsMixin:
    """`data_parallel_rank`, `data_parallel_shard_rank`, `tensor_parallel_rank` (Accelerate's meanings: 0 where the
    dimension is not enabled; RuntimeError without a parallelism_config)."""

    parallelism_config: Any
    torch_device_mesh: Any
    strategy: Any

    @property
    def deepspeed_engine_wrapped(self) -> Any:
        """Under DeepSpeed, the DeepSpeedEngineWrapper of the prepared model (None before prepare or without it)."""
        return getattr(self.strategy, "engine", None)

    @property
    def deepspeed_config(self) -> Any:
        """Under DeepSpeed, the config its engine was built with (the plugin's before prepare); else None."""
        built = getattr(self.strategy, "config", None)
        plugin = getattr(self.strategy, "plugin", None)
        return built if built is not None else getattr(plugin, "deepspeed_config", None)

    def _rank_in(self, dimension: str, what: str) -> int:
        if self.parallelism_config is None:
            raise RuntimeError(f"{what} is not configured: pass Accelerator(parallelism_config=ParallelismConfig(...)).")
        if self.torch_device_mesh is None or dimension not in (self.torch_device_mesh.mesh_dim_names or ()):
            return 0
        return int(self.torch_device_mesh.get_local_rank(dimension))

    @property
    def data_parallel_rank(self) -> int:
        """This process's rank along dp_replicate (0 when that dimension is not enabled)."""
        return self._rank_in("dp_replicate", "Data parallelism")

    @property
    def data_parallel_shard_rank(self) -> int:
        """This process's rank along dp_shard (0 when that dimension is not enabled)."""
        return self._rank_in("dp_shard", "Shard-based data parallelism")

    @property
    def tensor_parallel_rank(self) -> int:
        """This process's rank along tp (0 when that dimension is not enabled)."""
        return self._rank_in("tp", "Tensor parallelism")
