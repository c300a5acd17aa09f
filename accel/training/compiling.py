"""torch.compile through the Accelerator: the options resolved once at construction, the compile in prepare.

`resolve` merges the script's `dynamo_backend` / `TorchDynamoPlugin` with the ACCEL_DYNAMO_*
variables (`accel launch`, config.yaml's dynamo_config) and checks that the backend can run
here; `compile_model` wraps a prepared model (after the precision's conversion and DDP, as
Accelerate orders it) in torch.compile. The compiled wrapper adds `_orig_mod.` to parameter
names; `model.unwrap_model(keep_torch_compile=False)` removes it, which is what every model file
and checkpoint uses.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from typing import Any, cast

import torch
from torch import nn

from accel.kwargs_handlers.dynamo import TorchDynamoPlugin, backend_name, check_mode
from accel.settings import (
    DYNAMO_BACKEND,
    DYNAMO_MODE,
    DYNAMO_USE_DYNAMIC,
    DYNAMO_USE_FULLGRAPH,
    DYNAMO_USE_REGIONAL_COMPILATION,
    Setting,
)
from accel.training.blocks import is_repeated_blocks

_LIBRARIES = {"tvm": "tvm", "onnxrt": "onnxruntime", "hpu_backend": "habana_frameworks", "neuron": "torch_neuronx"}
"""Backends torch lists but that need a library to run, and that library's module."""
_CUDA_ONLY_BACKENDS = frozenset({"cudagraphs"})
_CUDA_GRAPH_MODES = frozenset({"reduce-overhead"})
"""Modes whose whole point is CUDA graphs (max-autotune also tunes kernels, which runs on any device)."""


def resolve(dynamo_backend: Any, plugin: TorchDynamoPlugin | None, device: torch.device) -> TorchDynamoPlugin:
    """The plugin in force: every field given, else its ACCEL_DYNAMO_* variable, else its default; checked here.

    Raises at construction: both `dynamo_backend` and `dynamo_plugin` given, a backend torch
    does not have here (or whose library is missing, or that needs CUDA), a mode the backend lacks.
    """
    if plugin is not None and dynamo_backend is not None:
        raise ValueError(
            f"Accelerator got dynamo_backend={dynamo_backend!r} and dynamo_plugin: give the backend in one place "
            "only, TorchDynamoPlugin(backend=...) or dynamo_backend=."
        )
    if plugin is not None and not isinstance(plugin, TorchDynamoPlugin):
        raise TypeError(
            f"Accelerator(dynamo_plugin={plugin!r}): give a TorchDynamoPlugin (from accel.utils import TorchDynamoPlugin)."
        )
    given = plugin or TorchDynamoPlugin()
    backend = _setting(DYNAMO_BACKEND, given.backend if dynamo_backend is None else backend_name(dynamo_backend))
    mode_source = "TorchDynamoPlugin.mode" if given.mode is not None else (DYNAMO_MODE.lookup() or (DYNAMO_MODE.env_var,))[0]
    mode = check_mode(backend, _setting(DYNAMO_MODE, given.mode), mode_source)
    resolved = TorchDynamoPlugin(
        backend=backend, mode=mode, fullgraph=_setting(DYNAMO_USE_FULLGRAPH, given.fullgraph),
        dynamic=_setting(DYNAMO_USE_DYNAMIC, given.dynamic), options=given.options, disable=given.disable,
        use_regional_compilation=_setting(DYNAMO_USE_REGIONAL_COMPILATION, given.use_regional_compilation),
    )
    if backend != "no":
        check_runs_here(backend, mode, device)
    return resolved


def _setting(setting: Setting, value: Any) -> Any:
    """`value` when given; else the environment's (ACCEL_DYNAMO_*, or accelerate launch's ACCELERATE_DYNAMO_*),
    else the default. A given value that contradicts the environment wins, with a warning naming both (as every
    Accelerator setting)."""
    found = setting.lookup()
    if value is None:
        return setting.default if found is None else found[1]
    if found is not None and found[1] != value:
        warnings.warn(
            f"{setting.name.removeprefix('dynamo_')}={value!r} given in the code overrides "
            f"{found[0]}={os.environ[found[0]]!r} (from accel launch, accelerate launch or your environment).",
            UserWarning,
            stacklevel=4,
        )
    return value


def check_runs_here(backend: str, mode: str, device: torch.device) -> None:
    """Raise when `backend` (with `mode`) cannot compile on `device` with the installed torch."""
    import torch._dynamo

    available = torch._dynamo.list_backends(exclude_tags=())
    if backend not in available:
        raise ValueError(
            f"dynamo_backend={backend!r} is not a torch.compile backend in torch {torch.__version__} here (it was "
            f"one in older versions or needs another package). Backends here: {', '.join(sorted(_accepted(available)))}."
        )
    library = _LIBRARIES.get(backend)
    if library is not None and importlib.util.find_spec(library) is None:
        raise ValueError(
            f"dynamo_backend={backend!r} needs the {library!r} package, which is not installed here; "
            "install it or use 'inductor'."
        )
    if device.type != "cuda" and (backend in _CUDA_ONLY_BACKENDS or mode in _CUDA_GRAPH_MODES):
        what = f"backend {backend!r}" if backend in _CUDA_ONLY_BACKENDS else f"mode {mode!r}"
        raise ValueError(
            f"dynamo {what} runs CUDA graphs, which need a CUDA device; this Accelerator trains on {device}. "
            "Use backend 'inductor' with mode 'default' (or 'max-autotune-no-cudagraphs')."
        )


def _accepted(available: list[str]) -> list[str]:
    from accel.kwargs_handlers.dynamo import DYNAMO_BACKENDS

    return [name for name in DYNAMO_BACKENDS if name in available]


def compile_kwargs(plugin: TorchDynamoPlugin) -> dict[str, Any]:
    """torch.compile's keyword arguments for a resolved plugin (mode 'default' is torch's own default)."""
    kwargs: dict[str, Any] = {"backend": plugin.backend, "fullgraph": plugin.fullgraph, "dynamic": plugin.dynamic}
    if plugin.mode != "default":
        kwargs["mode"] = plugin.mode
    if plugin.options is not None:
        kwargs["options"] = dict(plugin.options)
    if plugin.disable:
        kwargs["disable"] = True
    return kwargs


def is_compiled(model: Any) -> bool:
    """Whether `model` is torch.compile's wrapper (an OptimizedModule). Imports nothing: before
    torch._dynamo is imported, nothing can have been compiled."""
    dynamo = sys.modules.get("torch._dynamo.eval_frame")
    return dynamo is not None and isinstance(model, dynamo.OptimizedModule)


def has_compiled_regions(model: nn.Module) -> bool:
    """Whether a submodule of `model` (or `model`) is compiled: torch.compile's wrapper, or compiled in place."""
    dynamo = sys.modules.get("torch._dynamo.eval_frame")
    return any(
        getattr(module, "_compiled_call_impl", None) is not None
        or (dynamo is not None and isinstance(module, dynamo.OptimizedModule))
        for module in model.modules()
    )


def compile_model(model: nn.Module, plugin: TorchDynamoPlugin) -> nn.Module:
    """`model` compiled as `plugin` says; as it is when the backend is 'no' or it is compiled already.

    With `use_regional_compilation` the model inside DDP is compiled region by region, in place
    (`compile_regions`), and the same object comes back.
    """
    if plugin.backend == "no" or is_compiled(model):
        return model
    if plugin.use_regional_compilation:
        inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
        if not has_compiled_regions(inner):
            compile_regions(inner, **compile_kwargs(plugin))
        return model
    return torch.compile(model, **compile_kwargs(plugin))  # type: ignore[return-value]  # an OptimizedModule


def compile_regions(module: nn.Module, **kwargs: Any) -> nn.Module:
    """Compile `module` region by region, in place (`module.compile()`), as Accelerate's regional compilation:
    each block of an `nn.ModuleList` of identical blocks is compiled on its own (the blocks share one
    compiled code, so a stack of N blocks costs one block's compile, not N), every other part that
    holds no such list is compiled as one region, and the modules in between run eagerly.

    In place, not wrapped: parameter names, hooks (FSDP2's per-block all-gathers, activation
    checkpointing) and `isinstance` checks stay as they were. Returns `module`.

    >>> net = nn.Sequential(nn.Linear(4, 4), nn.ModuleList([nn.Linear(4, 4) for _ in range(3)]))
    >>> compiled = compile_regions(net, backend="eager")
    >>> [m._compiled_call_impl is not None for m in (net, net[0], net[1], net[1][0])]
    [False, True, False, True]
    """
    if is_repeated_blocks(module):
        for block in cast(nn.ModuleList, module):
            block.compile(**kwargs)
    elif any(is_repeated_blocks(submodule) for submodule in module.modules()):
        for child in module.children():
            compile_regions(child, **kwargs)
    else:
        module.compile(**kwargs)
    return module
