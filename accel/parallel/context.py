"""Context parallelism (`ParallelismConfig(cp_size=N)`): torch's `context_parallel` over the mesh's "cp" dimension,
as Accelerate runs it, on CUDA only.

Inside `accelerator.maybe_context_parallel(buffers=..., buffer_seq_dims=..., no_restore_buffers=...)` torch shards
the given buffers (input ids, labels, positions) along their sequence dimension over the cp ranks and replaces
`scaled_dot_product_attention` by ring attention, whose keys and values go round the ranks: all-gathered
(`cp_comm_strategy="allgather"`, the default) or passed on by all-to-all ("alltoall"). The ring runs in torch's
CUDA flash/efficient attention kernels only (torch 2.13 has no sharding rule for the CPU kernel), so a run on
another device is refused when the Accelerator is built (accel.parallel.layout), naming sp_size, which splits
the sequence on any device. As in Accelerate, FSDP2 shards over dp_shard and cp together, the cp ranks share their
batches, and each self-attention module loses its attention mask for `is_causal=True` (the ring masks causally by
itself); models with sliding-window or chunked layers are refused (their mask cannot be dropped).

Written against torch's real API (torch.distributed.tensor.experimental.context_parallel and _attention's
set_rotate_method); run on GPUs by tests/parallel/test_context_parallel.py's GPU-marked test (2 GPUs or more).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from torch import nn

from accel.kwargs_handlers.context_parallel import TorchContextParallelConfig


class ContextParallel:
    """The cp dimension of this run and what prepare and `maybe_context_parallel` do with it.

    Args:
        mesh: The Accelerator's DeviceMesh (with a "cp" dimension).
        handler: The options (None: TorchContextParallelConfig's defaults).
    """

    def __init__(self, mesh: Any, handler: TorchContextParallelConfig | None) -> None:
        from torch.distributed.tensor.experimental._attention import set_rotate_method

        self.mesh = mesh["cp"]
        self.strategy = str((handler or TorchContextParallelConfig()).cp_comm_strategy)  # checked: a str
        set_rotate_method(self.strategy)

    def prepare_model(self, model: nn.Module) -> None:
        """Make `model`'s self-attention causal by flag (its mask dropped), as ring attention needs; refuse a model
        with sliding-window or chunked layers.

        Args:
            model: The model given to prepare.
        """
        refuse_windowed_layers(model, f"ParallelismConfig(cp_size={self.mesh.size()})")
        for name, module in model.named_modules():
            if name.endswith("self_attn"):
                module.register_forward_pre_hook(_causal_by_flag, with_kwargs=True, prepend=True)

    @contextlib.contextmanager
    def region(self, buffers: Any, buffer_seq_dims: Any, no_restore_buffers: Any) -> Iterator[None]:
        """torch's `context_parallel` over the cp dimension, with the buffers it shards.

        Args:
            buffers: Tensors sharded along their sequence dimension inside the region.
            buffer_seq_dims: Their sequence dimensions.
            no_restore_buffers: Those left sharded when the region ends.
        """
        from torch.distributed.tensor.experimental import context_parallel

        with context_parallel(self.mesh, buffers=buffers, buffer_seq_dims=buffer_seq_dims,
                              no_restore_buffers=no_restore_buffers):
            yield


def _causal_by_flag(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    if "attention_mask" in kwargs:
        kwargs["attention_mask"] = None
        kwargs["is_causal"] = True
    return args, kwargs


def refuse_windowed_layers(model: nn.Module, what: str) -> None:
    """Refuse a model whose attention layers mask more than causally (sliding windows, chunks) or are not attention
    (linear attention): splitting the sequence and masking it causally as a whole would train them silently wrong.

    Args:
        model: The model.
        what: The setting that splits the sequence, for the message.
    """
    config: Any = getattr(model, "config", None)
    text: Any = config.get_text_config() if hasattr(config, "get_text_config") else config
    layers = set(getattr(text, "layer_types", None) or ["full_attention"])
    if getattr(text, "sliding_window", None) is not None and getattr(text, "use_sliding_window", True):
        layers.add("sliding_attention")
    if layers - {"full_attention"}:
        raise ValueError(
            f"{what}: the model has {sorted(layers - {'full_attention'})} layers; splitting the sequence masks it "
            "causally as a whole, which would silently widen a sliding window and gives wrong gradients to recurrent "
            "(linear-attention) layers. Use a full-attention model, or leave the sequence whole."
        )
