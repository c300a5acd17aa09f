"""Preparing a model for a precision and for several processes, and undoing the wrapping again."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from accel.backends.base import ForwardWrapper, PrecisionBackend
from accel.distributed import operations
from accel.distributed.process_state import ProcessState
from accel.kwargs_handlers import DistributedDataParallelKwargs

if TYPE_CHECKING:
    from accel.quantization import Quantizer


def prepare_model(
    model: nn.Module,
    backend: PrecisionBackend,
    device: torch.device,
    place: bool,
    state: ProcessState | None = None,
    quantizer: Quantizer | None = None,
    keep_masters: bool = True,
) -> nn.Module:
    """Move `model` to `device`, convert it for the precision and install its forward wrapper.

    With `keep_masters` (a model that will train) the precision first gives its trainable weights
    the dtype it steps, in place (`PrecisionBackend.keep_masters`: float32 masters under mixed
    precision); quantized weights are frozen by then and keep theirs.

    Preparing a model twice (by one Accelerator or by several in turn) leaves one wrapper; a
    DistributedDataParallel model is prepared through the module inside it. With several
    processes, process 0's weights are sent to all before the conversion, so that everything a
    backend derives from them is the same on every process too.
    """
    model = unwrap_model(model)
    restore_forward(model)
    if place:
        model.to(device)
    if state is not None and state.distributed:
        broadcast_module(model, state)
    if quantizer is not None:  # weights are equal on every process by now, so their quant states are too
        quantizer.convert(model)
    if keep_masters:
        backend.keep_masters(model)
    model = backend.convert_module(model)
    forward = model.forward
    wrapped = backend.wrap_forward(forward)
    if wrapped is not forward:
        model.forward = wrapped
    return model


def broadcast_module(model: nn.Module, state: ProcessState) -> None:
    """Copy process 0's parameters and buffers into `model` on every process.

    A DTensor is left as it is: it was placed over its mesh already (transformers'
    `from_pretrained(tp_plan=..., device_mesh=...)` gives each process its slice of the same checkpoint), and
    process 0's slice is not the others' to receive (torch has no broadcast for DTensors either).

    Raises ValueError on every process, naming the first difference, when the processes' models
    do not have the same tensors (names, shapes, dtypes).
    """
    from torch.distributed.tensor import DTensor

    check_same_layout(model, state)
    named = [*model.named_parameters(), *model.named_buffers()]
    with torch.no_grad():
        for _, tensor in named:
            if not isinstance(tensor, DTensor):
                operations.broadcast(tensor.detach(), state, check_shapes=False)  # layout checked above


def check_same_layout(model: nn.Module, state: ProcessState, *, tied_names: bool = False) -> None:
    """Raise ValueError on every process, naming the first difference, unless every process's model has
    the same tensors (names, shapes, dtypes). `tied_names`: list a tied parameter under each of its names."""
    named = [*model.named_parameters(remove_duplicate=not tied_names), *model.named_buffers()]
    layout = [(name, tuple(t.shape), str(t.dtype)) for name, t in named]
    for rank, theirs in enumerate(operations.gather_objects(layout, state)):
        if theirs != layout:
            difference = next((f"{a} here, {b} there" for a, b in zip(layout, theirs) if a != b), "a different count")
            raise ValueError(
                f"prepare: the model differs between process {state.process_index} and process {rank} "
                f"({difference}); every process must build the same model before prepare()."
            )


def wrap_for_processes(model: nn.Module, state: ProcessState, options: DistributedDataParallelKwargs) -> nn.Module:
    """`model` in DistributedDataParallel when several processes train it, else `model` itself.

    Called after the precision's conversion, so that DDP registers the parameters that train. A
    backend that averages some gradients itself (FP8 gradients kept outside `param.grad`) marks
    those parameters at conversion with DDP's own `_set_params_and_buffers_to_ignore_for_model`;
    a model with no other parameter that trains is returned as it is. The processes' weights
    already agree (see `broadcast_module`), so DDP's own start-up broadcast is skipped.
    """
    if not state.distributed:
        return model
    ignored = set(getattr(model, "_ddp_params_and_buffers_to_ignore", ()))
    if not any(p.requires_grad for name, p in model.named_parameters() if name not in ignored):
        return model
    device_ids = [state.device] if state.device.type in ("cuda", "xpu") else None
    # Only the options the user changed: torch's defaults are the handler's, and naming a
    # deprecated option (broadcast_buffers) at its default would make torch warn for nothing.
    wrapped = DistributedDataParallel(model, device_ids=device_ids, init_sync=False, **options.ddp_kwargs())
    options.register_comm_hook(wrapped)
    return wrapped


class DistributedDataParallel(nn.parallel.DistributedDataParallel):
    """torch's DistributedDataParallel, whose attributes it lacks are read from the model it wraps.

    A script that reads `model.config` or calls `model.gradient_checkpointing_enable()` after `prepare` runs on one
    process and fails on several under Accelerate, whose DDP has no such attribute (Accelerate's own nd_parallel.py
    example does so with `--dp-replicate-size`); here it gets the model's. Everything DDP has is DDP's own (its
    `forward`, `no_sync`, `module`, ...), so nothing that runs under Accelerate changes, and the lookup costs
    nothing on the hot path (Python asks `__getattr__` only for names the wrapper does not have). Lightning
    Fabric's module wrapper forwards attributes the same way.

    >>> # model = accelerator.prepare(model)  # on 2 processes: this class
    >>> # model.config is accelerator.unwrap_model(model).config  -> True
    """

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            inner = self.__dict__.get("_modules", {}).get("module")
            if inner is None:
                raise
            return getattr(inner, name)


def restore_forward(model: nn.Module) -> None:
    """Remove the forward wrapper accel installed on `model`, if any."""
    wrapper = model.__dict__.get("forward")
    if not isinstance(wrapper, ForwardWrapper):
        return
    original = wrapper.__wrapped__
    if getattr(original, "__self__", None) is model and getattr(original, "__func__", None) is type(model).forward:
        del model.forward
    else:
        model.forward = original


def _is_deepspeed_engine(model: nn.Module) -> bool:
    """Whether `model` is DeepSpeed's engine (checked only where deepspeed was imported, which building one does)."""
    deepspeed = sys.modules.get("deepspeed")
    return deepspeed is not None and isinstance(model, deepspeed.DeepSpeedEngine)


def unwrap_model(model: nn.Module, *, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True) -> nn.Module:
    """The user's model inside torch.compile, DDP and DataParallel; compiled again when kept.

    With `keep_torch_compile=True` a compiled model is given compiled: the same wrapper when it
    holds the user's model directly, else (compiled over DDP, as prepare does with several
    processes) a new wrapper with the same compile settings around the model inside DDP, so that
    the prepared model itself is left as it is. With `keep_fp32_wrapper=False` the precision's
    forward wrapper is removed as well.
    """
    from accel.training.compiling import is_compiled

    compiled = model if is_compiled(model) else None
    if compiled is not None:
        model = compiled._orig_mod  # type: ignore[assignment]  # a compiled module's _orig_mod is a Module
    while isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)) or _is_deepspeed_engine(model):
        model = cast(nn.Module, model.module)
    if not keep_fp32_wrapper:
        restore_forward(model)
    if not keep_torch_compile or compiled is None:
        return model
    if compiled._orig_mod is model:
        return compiled
    return type(compiled)(model, compiled.dynamo_ctx)
