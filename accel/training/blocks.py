"""The repeated blocks of a model, and activation checkpointing of them.

A transformer is mostly a stack of identical blocks; activation checkpointing and regional
compilation both act on one block at a time. Which modules are the blocks:

* named classes: every module whose class name is one of them (the outermost, when they nest);
* else the model's `_no_split_modules` (Hugging Face models list their block classes there), as
  FSDP's `transformer_based_wrap` finds them;
* else the repeated blocks: the children of each `nn.ModuleList` whose children all share one
  class (Accelerate's test for regional compilation), the outermost such lists only.

`checkpoint_modules` is the one place accel turns on activation checkpointing, for
`Accelerator(activation_checkpointing=...)` and for FSDP's `fsdp_activation_checkpointing` alike:
torch's composable `checkpoint` keeps each module where it is (parameter names, state dicts and
FSDP units do not change) and, in backward, recomputes the module's forward (with the RNG state of
the first run, so dropout draws the same) instead of keeping its intermediate activations.
`offload_saved_inputs` (FSDP's `fsdp_activation_checkpointing_offload`) moves what is still kept, each
checkpointed module's inputs, to CPU memory until backward. Selective checkpointing and the memory budget
(`activation_checkpointing_policy`) are accel.training.selective's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
from torch import nn
from torch.distributed._composable import checkpoint
from torch.distributed._composable.contract import _get_registry

from accel.training.selective import selective_context, within_budget

_OFFLOADED = "_accel_offloads_saved_inputs"


def is_repeated_blocks(module: nn.Module) -> bool:
    """Whether `module` is an `nn.ModuleList` of at least one module, all of one class (Accelerate's test).

    >>> is_repeated_blocks(nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)]))
    True
    """
    if not isinstance(module, nn.ModuleList) or len(module) == 0:
        return False
    first = type(module[0])
    return all(isinstance(child, first) for child in module)


def repeated_blocks(model: nn.Module) -> list[nn.Module]:
    """The children of the outermost repeated-block lists of `model`, in order (empty when it has none).

    >>> net = nn.Sequential(nn.Linear(2, 2), nn.ModuleList([nn.ReLU(), nn.ReLU()]))
    >>> [type(block).__name__ for block in repeated_blocks(net)]
    ['ReLU', 'ReLU']
    """
    if is_repeated_blocks(model):
        return list(cast(nn.ModuleList, model))
    return [block for child in model.children() for block in repeated_blocks(child)]


def class_names(model: nn.Module) -> list[str]:
    """The class names of `model`'s modules, each once, in the order first met."""
    return list(dict.fromkeys(type(m).__name__ for m in model.modules()))


def modules_of_classes(model: nn.Module, names: Sequence[str]) -> list[nn.Module]:
    """The outermost modules of `model` (not the model itself) whose class name is in `names`."""
    wanted = set(names)
    found: list[nn.Module] = []

    def visit(module: nn.Module) -> None:
        for child in module.children():
            if type(child).__name__ in wanted:
                found.append(child)
            else:
                visit(child)

    visit(model)
    return found


def find_blocks(model: nn.Module, names: Sequence[str] | None, argument: str) -> list[nn.Module]:
    """The blocks of `model`: of the classes `names`, else of its `_no_split_modules`, else its repeated blocks.

    Raises ValueError naming `argument` when a given class name matches no module, or when
    nothing is found (with the model's classes, so that the user can name the block class).
    """
    if names:
        unknown = [name for name in names if name not in class_names(model)]
        if unknown:
            raise ValueError(
                f"{argument}: {', '.join(map(repr, unknown))} match(es) no module of {type(model).__name__}. "
                f"Its classes: {', '.join(class_names(model))}. Name the class of its repeated blocks."
            )
        return modules_of_classes(model, names)
    declared = [name for name in getattr(model, "_no_split_modules", None) or () if name in class_names(model)]
    blocks = modules_of_classes(model, declared) if declared else repeated_blocks(model)
    if not blocks:
        raise ValueError(
            f"{argument}: {type(model).__name__} has no _no_split_modules and no nn.ModuleList of identical blocks, "
            f"so accel cannot tell which modules are its blocks. Name their class instead (such as "
            f"{argument.split('=')[0]}=['Block']); its classes: {', '.join(class_names(model))}."
        )
    return blocks


def is_checkpointed(module: nn.Module) -> bool:
    """Whether activation checkpointing is on for `module` (torch's composable `checkpoint`)."""
    return "checkpoint" in (_get_registry(module) or {})


def checkpoint_modules(modules: Sequence[nn.Module], selective: bool = False) -> None:
    """Recompute each module's activations in backward instead of keeping them; in place, names unchanged.

    A module already checkpointed (by the Accelerator's option and FSDP's both) is left as it is. `selective`:
    keep the outputs of the expensive ops and recompute the rest (accel.training.selective).

    >>> block = nn.Linear(4, 4)
    >>> checkpoint_modules([block, block])
    >>> is_checkpointed(block)
    True
    """
    options = {"context_fn": selective_context} if selective else {}
    for module in modules:
        if not is_checkpointed(module):
            checkpoint(module, **options)


def offload_saved_inputs(modules: Sequence[nn.Module], pin_memory: bool) -> None:
    """Keep what each checkpointed module saves for its recompute (its inputs) in CPU memory from its forward to
    its backward, as Accelerate's `offload_wrapper` around `checkpoint_wrapper` does; in place, names unchanged.

    torch's `save_on_cpu` is entered before the checkpoint's forward hooks and left after them, so the inputs the
    checkpoint saves are packed to the CPU (and brought back in backward); the recompute in backward runs without
    it (what it saves is the checkpoint's own). A module offloaded already is left as it is.

    Args:
        modules: Modules checkpointed by `checkpoint_modules`.
        pin_memory: Copy into pinned memory (for a GPU's tensors: the copies back overlap); False on a CPU run,
            where the inputs are in host memory already and nothing is copied.

    >>> block = nn.Linear(4, 4)
    >>> checkpoint_modules([block])
    >>> offload_saved_inputs([block], pin_memory=False)
    >>> block(torch.ones(2, 4, requires_grad=True)).sum().backward()
    """
    for module in modules:
        if not is_checkpointed(module):  # its hooks read the checkpoint's state: say so here, not in forward
            raise ValueError(f"offload_saved_inputs: {type(module).__name__} is not checkpointed; "
                             "call checkpoint_modules on it first (offloading moves what checkpointing saves)")
        if not getattr(module, _OFFLOADED, False):
            _offload(module, pin_memory)
            setattr(module, _OFFLOADED, True)


def _offload(module: nn.Module, pin_memory: bool) -> None:
    entered: list[Any] = []

    def enter(module: nn.Module, args: Any) -> None:
        if checkpoint.state(module).enable_hook:  # False while the checkpoint recomputes in backward
            hooks = torch.autograd.graph.save_on_cpu(pin_memory=pin_memory)
            hooks.__enter__()
            entered.append(hooks)

    def leave(module: nn.Module, args: Any, output: Any) -> None:
        if entered:
            entered.pop().__exit__(None, None, None)

    module.register_forward_pre_hook(enter, prepend=True)  # before the checkpoint's, which saves the inputs
    module.register_forward_hook(leave, always_call=True)  # after the checkpoint's (it prepended its own)


def checkpoint_blocks(model: nn.Module, blocks: bool | Sequence[str], policy: str | float = "full") -> list[nn.Module]:
    """Checkpoint `model`'s blocks as `Accelerator(activation_checkpointing=blocks,
    activation_checkpointing_policy=policy)` says; the blocks checkpointed.

    `blocks`: False (none), True (found by `find_blocks`), or the blocks' class names. `policy`: "full",
    "selective" or a memory budget from 0 to 1 (accel.training.selective).

    >>> net = nn.Sequential(nn.Linear(4, 4), nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)]))
    >>> len(checkpoint_blocks(net, True))
    2
    """
    if blocks is False:
        return []
    names = None if blocks is True else list(blocks)
    found = find_blocks(model, names, f"activation_checkpointing={blocks!r}")
    if not isinstance(policy, str):
        found = within_budget(found, policy)
    checkpoint_modules(found, selective=policy == "selective")
    return found
