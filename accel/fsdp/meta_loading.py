"""Sharding a model that not every process holds whole: FSDP2 on the meta device, then filled.

Two cases reach `prepare` (accel/fsdp/strategy.py asks `loading_mode` before anything moves):

* 'rank0' (`cpu_ram_efficient_loading=True`): process 0 holds the real weights; the others may
  hold the model on the meta device (built in `accelerator.init_module()`), or a full copy they
  then drop. Every process moves its parameters to the meta device, fully_shard runs there, and
  process 0's full state dict is broadcast into the shards (torch's `set_model_state_dict` with
  `broadcast_from_rank0=True`): each process allocates only its shards.
* 'empty' (`init_module(empty_init=True)` on every process): sharded on the meta device, then each
  process allocates its shards and initialises them with `reset_parameters()` (accel/training/meta_init.py);
  real weights are loaded afterwards (`accelerator.load_state`).

Buffers are not sharded: they stay real (process 0's values are sent to all, since a library may
give the other processes placeholders), and tied weights are tied as on process 0.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

from accel.distributed import operations
from accel.distributed.process_state import ProcessState
from accel.training.meta_init import materialize, meta_state
from accel.training.model import check_same_layout

if TYPE_CHECKING:
    from torch.distributed.checkpoint.state_dict import ValueType


def loading_mode(model: nn.Module, rank0_loading: bool, state: ProcessState) -> str | None:
    """'empty' (on the meta device on every process), 'rank0' (cpu_ram_efficient_loading: process 0's
    weights fill the shards) or None (every process holds the real model: the usual path). A collective.

    Raises ValueError on every process, naming the processes, when process 0 holds a meta model
    under cpu_ram_efficient_loading, when some processes hold a meta model and others a real one
    without it, or when a model is only partly on the meta device.
    """
    states = operations.gather_objects(meta_state(model), state)
    mixed = [rank for rank, s in enumerate(states) if s == "mixed"]
    if mixed:
        raise ValueError(
            f"prepare: the model on process(es) {mixed} has some parameters on the meta device and some not; build "
            "it wholly on the meta device (accelerator.init_module(empty_init=True)) or wholly real."
        )
    if all(s == "meta" for s in states):
        return "empty"
    if rank0_loading:
        if states[0] == "meta":
            raise ValueError(
                "prepare: cpu_ram_efficient_loading=True sends process 0's weights to the others, but process 0's "
                "model is on the meta device. Build it with real weights on process 0 (accelerator.init_module() "
                "does that: only the other processes build on the meta device)."
            )
        return "rank0"
    if "meta" in states:
        meta = [rank for rank, s in enumerate(states) if s == "meta"]
        raise ValueError(
            f"prepare: the model is on the meta device on process(es) {meta} only, and "
            "FullyShardedDataParallelPlugin.cpu_ram_efficient_loading is False, so nothing fills it. Set "
            "cpu_ram_efficient_loading=True (fsdp_cpu_ram_efficient_loading: true) to send process 0's weights, "
            "or build the model the same way on every process."
        )
    return None


@dataclass
class PendingWeights:
    """What `before_sharding` kept for `after_sharding`: process 0's full state dict and the real buffers."""

    mode: str
    full_state: dict[str, torch.Tensor]
    buffers: dict[str, torch.Tensor]
    tied: list[list[str]]


def before_sharding(model: nn.Module, mode: str, state: ProcessState) -> PendingWeights:
    """Tie the weights as on process 0, check that every process has the same tensors, keep process 0's
    full state dict (references, no copy) and move every parameter to the meta device."""
    tied = _tie_as_on_process_0(model, state)
    check_same_layout(model, state, tied_names=True)
    full_state = model.state_dict() if mode == "rank0" and state.process_index == 0 else {}
    buffers = {name: _real_buffer(b, state.device) for name, b in model.named_buffers()}
    _parameters_to_meta(model)
    return PendingWeights(mode, full_state, buffers, tied)


def after_sharding(model: nn.Module, pending: PendingWeights, state: ProcessState, offload: bool = False) -> None:
    """Give the sharded meta parameters memory: process 0's weights (mode 'rank0') or `reset_parameters`.
    `offload`: the shards belong in CPU memory (FSDP2's CPUOffloadPolicy), wherever the broadcast ran."""
    _restore_buffers(model, pending.buffers, state)
    if pending.mode == "empty":
        materialize(model, torch.device("cpu") if offload else state.device)
        return
    # torch's parameter is a dict (invariant) of its ValueType union, of which a tensor is one
    weights = cast("dict[str, ValueType]", pending.full_state)
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, strict=True, cpu_offload=offload)
    with warnings.catch_warnings():  # torch's own use of its deprecated device look-up, nothing the user can act on
        warnings.filterwarnings("ignore", message=".*_get_pg_default_device.*will be deprecated", category=UserWarning)
        warnings.filterwarnings("ignore", message="Multiple backends are registered", category=UserWarning)
        set_model_state_dict(model, weights, options=options)  # assigns each name its own tensor: unties
    pending.full_state.clear()
    _tie(model, pending.tied)
    leftover = [name for name, p in model.named_parameters() if p.is_meta]
    if leftover:  # torch fills every key of the state dict; a parameter outside it would stay empty
        raise RuntimeError(f"prepare: cpu_ram_efficient_loading left parameters on the meta device: {leftover[:5]}")


def _tie_as_on_process_0(model: nn.Module, state: ProcessState) -> list[list[str]]:
    """Share parameters between the names that share one on process 0 (building on the meta device
    may untie what a library ties by assignment); returns those groups of names."""
    groups: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(parameter), []).append(name)
    tied: list[list[str]] = operations.broadcast_object([names for names in groups.values() if len(names) > 1], state)
    _tie(model, tied)
    return tied


def _tie(model: nn.Module, tied: list[list[str]]) -> None:
    """Each group's names share the first name's parameter."""
    for first, *others in tied:
        shared = model.get_parameter(first)
        for name in others:
            owner, _, attribute = name.rpartition(".")
            setattr(model.get_submodule(owner), attribute, shared)


def _real_buffer(buffer: torch.Tensor, device: torch.device) -> torch.Tensor:
    return torch.empty_like(buffer, device=device) if buffer.is_meta else buffer


def _parameters_to_meta(model: nn.Module) -> None:
    """Every parameter replaced by a meta one of its class and requires_grad (a shared one stays shared)."""
    moved: dict[int, nn.Parameter] = {}
    for module in model.modules():
        for name, parameter in module._parameters.items():
            if parameter is None or parameter.is_meta:
                continue
            if id(parameter) not in moved:
                moved[id(parameter)] = nn.Parameter(parameter.to("meta"), requires_grad=parameter.requires_grad)
            module._parameters[name] = moved[id(parameter)]


def _restore_buffers(model: nn.Module, buffers: dict[str, torch.Tensor], state: ProcessState) -> None:
    """Every buffer real again, with process 0's values (fully_shard leaves buffers whole)."""
    with torch.no_grad():
        for name, kept in buffers.items():
            owner, _, attribute = name.rpartition(".")
            module = model.get_submodule(owner)
            current = module._buffers[attribute]
            value = kept.to(current.device if current is not None and not current.is_meta else state.device)
            operations.broadcast(value, state, check_shapes=False)  # shapes checked in before_sharding
            module._buffers[attribute] = value
