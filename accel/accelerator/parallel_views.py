"""Accelerate's views of the device mesh on the Accelerator: this process's rank in each dimension, and
`maybe_context_parallel`, the region a context-parallel step runs in (accel.parallel.context)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


class ParallelViewsMixin:
    """`data_parallel_rank`, `data_parallel_shard_rank`, `tensor_parallel_rank` (Accelerate's meanings: 0 where the
    dimension is not enabled; RuntimeError without a parallelism_config), `maybe_context_parallel`."""

    parallelism_config: Any
    torch_device_mesh: Any
    strategy: Any
    context_parallel: Any

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

    def deepspeed_ulysses_dl_adapter(self, dl: Any, model: Any = None) -> Any:
        """`dl` in DeepSpeed's Ulysses dataloader adapter (Accelerate's method, for a dataloader prepared apart from
        the model): with `ParallelismConfig(sp_size > 1, sp_backend="deepspeed")`, once the model is prepared;
        `dl` itself otherwise.

        Args:
            dl: A prepared dataloader.
            model: The prepared model (Accelerate's argument; the groups come from its preparation).

        Example:
            ```python
            loader = accelerator.deepspeed_ulysses_dl_adapter(accelerator.prepare(loader), model)
            ```
        """
        config = self.parallelism_config
        if config is None or not config.deepspeed_ulysses:
            return dl
        mpu = getattr(self.strategy, "mpu", None)
        if mpu is None:
            raise RuntimeError("deepspeed_ulysses_dl_adapter: prepare the model first (DeepSpeed's Ulysses groups are "
                               "made when the model is prepared).")
        from accel.deepspeed.ulysses import adapt_loader

        return adapt_loader(dl, mpu, self.strategy.process_state.device)

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

    @contextlib.contextmanager
    def maybe_context_parallel(
        self, buffers: Any = None, buffer_seq_dims: Any = None, no_restore_buffers: Any = None
    ) -> Iterator[None]:
        """The region one context-parallel training step runs in (Accelerate's method). With `cp_size` > 1 (CUDA
        only: refused elsewhere when the Accelerator is built), torch's `context_parallel` shards `buffers` along
        their sequence dimension over the cp ranks inside it and runs attention as ring attention
        (accel.parallel.context); with `cp_size` 1 it changes nothing, so a script that enters it every step, as
        Accelerate's long-context examples do, runs unchanged (where Accelerate logs that it has no effect).

        Args:
            buffers: The tensors to shard along the sequence (inputs, labels, position ids); changed in place.
            buffer_seq_dims: The sequence dimension of each buffer.
            no_restore_buffers: The buffers left sharded on leaving the region (the others are put back whole).

        Example:
            ```python
            with accelerator.maybe_context_parallel(buffers=[batch["input_ids"]], buffer_seq_dims=[1]):
                loss = model(**batch).loss
                accelerator.backward(loss)
            ```
        """
        if self.context_parallel is None:
            yield
            return
        with self.context_parallel.region(buffers, buffer_seq_dims, no_restore_buffers):
            yield
