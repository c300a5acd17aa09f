"""Sharding a prepared model with torch's fully_shard (FSDP2): the blocks first, then the root.

Each unit (a transformer block, a large submodule, then the root with whatever is left) keeps
only its shard of every parameter as a DTensor and all-gathers the full parameters just for
its own forward and backward, then reduce-scatters the gradients. Units are sharded bottom-up
(a unit's parameters must not already belong to an inner unit), as torch requires.

`shard_model` runs after the precision's conversion (the weights have their dtype and the
processes' weights already agree), in place of DistributedDataParallel.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, OffloadPolicy, fully_shard

from accel._warnings import warn_once
from accel.distributed.process_state import ProcessState
from accel.fsdp.plugin import DEFAULT_MIN_NUM_PARAMS, FullyShardedDataParallelPlugin
from accel.fsdp.precision import mixed_precision_policy
from accel.quantization.sharding import address_quant_states, check_quant_storage
from accel.training.blocks import checkpoint_modules, offload_saved_inputs


def shard_model(
    model: nn.Module,
    plugin: FullyShardedDataParallelPlugin,
    precision_name: str,
    device: torch.device,
    process_state: ProcessState,
    mesh: DeviceMesh | None = None,
) -> nn.Module:
    """`model` sharded over the processes as `plugin` says; the same object (its class becomes
    an FSDPModule subclass; parameter names do not change).

    `mesh`: the 1-D (shard) or 2-D (replicate, shard: HSDP) mesh to shard over, from the Accelerator's
    ParallelismConfig; None shards over all processes.

    With one process there is nothing to shard: the model trains unsharded (activation
    checkpointing still applies) and a warning says so, once per process. This is the only place
    that says it, for `accel launch --use_fsdp` and a plain `python script.py` alike. Raises
    ValueError for a wrap class name that matches no module. `precision_name` is the backend's
    `fsdp_precision` (FP8: its base).
    """
    # the plugin's __post_init__ made a dict of fields a MixedPrecisionPolicy
    given = cast("MixedPrecisionPolicy | None", plugin.mixed_precision_policy)
    policy = mixed_precision_policy(precision_name, given)
    units = modules_to_shard(model, plugin)
    if plugin.activation_checkpointing:
        checkpoint_modules(units)  # the same code as Accelerator(activation_checkpointing=...); skips blocks it did
        if plugin.activation_checkpointing_offload:
            offload_saved_inputs(units, pin_memory=device.type != "cpu")
    if not process_state.distributed:
        warn_once(
            "FullyShardedDataParallelPlugin (or use_fsdp) with one process: there is nothing to shard, so the "
            "model trains unsharded (activation_checkpointing still applies; cpu_offload, reshard_after_forward "
            "and the mixed_precision_policy have nothing to act on). Launch with several processes to shard it: "
            "accel launch --num_processes N --use_fsdp script.py.",
            UserWarning,
        )
        return model
    check_quant_storage(model, policy.param_dtype)
    mesh = mesh if mesh is not None else init_device_mesh(device.type, (process_state.num_processes,))
    reshard_after_forward = plugin.reshard_after_forward
    offload_policy = plugin.offload_policy or OffloadPolicy()
    attributes = parameter_attributes(model)
    for unit in units:
        fully_shard(unit, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=policy,
                    offload_policy=offload_policy)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=policy,
                offload_policy=offload_policy)
    restore_parameter_attributes(model, attributes)
    address_quant_states(model)  # bitsandbytes 4-bit weights: their quant state reachable for checkpoints
    return model


def parameter_attributes(model: nn.Module) -> dict[str, dict[str, object]]:
    """The public, non-tensor Python attributes that libraries set on parameters (TransformerEngine's
    `sequence_parallel`, ...), by parameter name. fully_shard replaces every parameter by a new DTensor
    one that lacks them (torch issue 136929). Private and tensor-valued attributes stay behind: they
    belong to the unsharded tensor (torchao's `_tensor`, ...) and would keep it alive."""
    kept = {}
    for name, parameter in model.named_parameters():
        public = {key: value for key, value in vars(parameter).items()
                  if not key.startswith("_") and not isinstance(value, torch.Tensor)}
        if public:
            kept[name] = public
    return kept


def restore_parameter_attributes(model: nn.Module, attributes: dict[str, dict[str, object]]) -> None:
    """Put back on the sharded parameters what `parameter_attributes` took from the unsharded ones."""
    for name, parameter in model.named_parameters():
        for key, value in attributes.get(name, {}).items():
            setattr(parameter, key, value)


def modules_to_shard(model: nn.Module, plugin: FullyShardedDataParallelPlugin) -> list[nn.Module]:
    """The submodules to shard as their own units before the root, innermost first.

    Raises ValueError when the transformer class names match no module of `model`.
    """
    policy = plugin.auto_wrap_policy
    if policy is None:
        return []
    if policy == "transformer_based_wrap":
        classes = set(_block_class_names(model, plugin))
        return [m for m in _post_order(model) if m is not model and type(m).__name__ in classes]
    if policy == "size_based_wrap":
        return _by_size(model, plugin.min_num_params or DEFAULT_MIN_NUM_PARAMS)
    # the plugin accepts no other str, so policy is the callable here
    return [m for m in _post_order(model) if m is not model and policy(m)]  # type: ignore[operator]  # a callable


def _block_class_names(model: nn.Module, plugin: FullyShardedDataParallelPlugin) -> tuple[str, ...]:
    """The transformer block class names to wrap, each checked against the model's own classes."""
    names = plugin.transformer_cls_names_to_wrap
    if names is None:
        names = tuple(getattr(model, "_no_split_modules", None) or ())
        if not names:
            raise ValueError(
                "FullyShardedDataParallelPlugin(auto_wrap_policy='transformer_based_wrap') needs "
                "transformer_cls_names_to_wrap (fsdp_transformer_layer_cls_to_wrap), and the model has no "
                f"_no_split_modules to take them from. Its classes: {', '.join(_class_names(model))}."
            )
    found = set(_class_names(model))
    unknown = [name for name in names if name not in found]
    if unknown:
        raise ValueError(
            f"FullyShardedDataParallelPlugin.transformer_cls_names_to_wrap: {', '.join(map(repr, unknown))} "
            f"match(es) no module of the model. The model's classes: {', '.join(_class_names(model))}. "
            "Name the class of its repeated blocks (fsdp_transformer_layer_cls_to_wrap)."
        )
    return names


def _class_names(model: nn.Module) -> list[str]:
    """The class names of `model`'s modules, each once, in the order first met."""
    return list(dict.fromkeys(type(m).__name__ for m in model.modules()))


def _post_order(module: nn.Module) -> list[nn.Module]:
    """`module` and its submodules, children before parents (each module once)."""
    seen: set[int] = set()
    order: list[nn.Module] = []

    def visit(current: nn.Module) -> None:
        if id(current) in seen:
            return
        seen.add(id(current))
        for child in current.children():
            visit(child)
        order.append(current)

    visit(module)
    return order


def _by_size(model: nn.Module, min_num_params: int) -> list[nn.Module]:
    """Submodules holding >= `min_num_params` parameters not already in an inner unit (FSDP1's
    size_based_auto_wrap_policy, bottom-up)."""
    taken: set[int] = set()
    units = []
    for module in _post_order(model):
        if module is model:
            continue
        free = [p for p in module.parameters() if id(p) not in taken]
        if sum(p.numel() for p in free) >= min_num_params:
            units.append(module)
            taken.update(id(p) for p in free)
    return units
