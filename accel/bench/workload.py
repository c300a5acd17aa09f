"""What `accel bench` trains: the example GPT by default, or the user's model through a hook.

The hook is a function in a Python file, named as `path/to/file.py:function`. It is called with
no arguments and returns `(model, batch_fn)` or `(model, batch_fn, loss_fn)`:

- `model`: a `torch.nn.Module` on the CPU, in fp32 (each precision trains its own copy);
- `batch_fn(step: int) -> (inputs, targets)`: the batch of step `step`, two tensors;
- `loss_fn(outputs, targets) -> scalar tensor` (optional): by default cross-entropy over the last
  dimension of the outputs, with integer class ids (token ids) as targets.

Tokens per second count the elements of `targets` when they are integer (token or class ids),
else the samples (the first dimension of `targets`).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

LossFn = Callable[[Any, torch.Tensor], torch.Tensor]
Batch = tuple[torch.Tensor, torch.Tensor]

HOOK_CONTRACT = (
    "it must return (model, batch_fn) or (model, batch_fn, loss_fn): an nn.Module, a function "
    "step -> (inputs, targets) with two tensors, and optionally a function (outputs, targets) -> loss"
)


class HookError(ValueError):
    """The `--model` hook cannot be loaded or did not return what the docs say."""


@dataclass
class Workload:
    """A model in fp32 on the CPU, the batches of every step, the loss and the tokens per step."""

    name: str
    model: nn.Module
    batches: list[Batch]
    loss_fn: LossFn
    tokens_per_step: int


def cross_entropy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of logits (..., classes) against integer targets (...): next-token loss."""
    return F.cross_entropy(outputs.reshape(-1, outputs.size(-1)).float(), targets.reshape(-1))


def gpt_workload(steps: int, batch_size: int, seed: int) -> Workload:
    """The example GPT (accel.bench.gpt) with `steps` batches of real corpus windows."""
    from accel.bench.gpt import GPT, GPTConfig, build_datasets

    torch.manual_seed(seed)
    config = GPTConfig()
    model = GPT(config)
    train, _ = build_datasets(config.block_size, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(len(train), (steps, batch_size), generator=generator)
    batches = []
    for row in starts.tolist():
        inputs, targets = zip(*(train[i] for i in row), strict=True)
        batches.append((torch.stack(inputs), torch.stack(targets)))
    name = f"example GPT ({config.n_layer} layers, width {config.n_embd}, batch {batch_size}x{config.block_size})"
    return Workload(name, model, batches, cross_entropy, batch_size * config.block_size)


def hook_workload(spec: str, steps: int, seed: int) -> Workload:
    """The workload of the hook `spec` ("path/to/file.py:function"), with `steps` batches."""
    torch.manual_seed(seed)  # before the import too: a model built at import time is seeded as well
    function = load_hook(spec)
    returned = function()
    model, batch_fn, loss_fn = check_hook_result(spec, returned)
    batches = [check_batch(spec, step, batch_fn(step)) for step in range(steps)]
    targets = batches[0][1]
    tokens = targets.numel() if not targets.is_floating_point() else (targets.shape[0] if targets.dim() else 1)
    return Workload(spec, model, batches, loss_fn, int(tokens))


def load_hook(spec: str) -> Callable[[], Any]:
    """Import the file of `spec` and return its function; HookError says what is wrong."""
    path_text, _, name = spec.rpartition(":")
    if not path_text or not name:
        raise HookError(f"--model {spec!r}: give the hook as path/to/file.py:function, for example model.py:make.")
    path = Path(path_text)
    if not path.is_file():
        raise HookError(f"--model {spec!r}: no file {str(path)!r} (relative paths start from the current folder).")
    module_spec = importlib.util.spec_from_file_location(f"accel_bench_hook_{path.stem}", path)
    if module_spec is None or module_spec.loader is None:
        raise HookError(f"--model {spec!r}: {str(path)!r} cannot be imported as Python; give a .py file.")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module  # so that pickling and dataclasses in the file work
    module_spec.loader.exec_module(module)
    function = getattr(module, name, None)
    if not callable(function):
        found = "nothing" if function is None else _a(type(function).__name__)
        raise HookError(f"--model {spec!r}: {str(path)!r} defines {found} named {name!r}, not a function.")
    return function


def check_hook_result(spec: str, returned: Any) -> tuple[nn.Module, Callable[[int], Any], LossFn]:
    """(model, batch_fn, loss_fn) from what the hook returned, or HookError naming what came back."""
    if not isinstance(returned, (tuple, list)) or len(returned) not in (2, 3):
        raise HookError(f"--model {spec!r} returned {describe(returned)}; {HOOK_CONTRACT}.")
    model, batch_fn, *rest = returned
    loss_fn = rest[0] if rest else cross_entropy
    if not isinstance(model, nn.Module) or not callable(batch_fn) or not callable(loss_fn):
        got = ", ".join(describe(item) for item in returned)
        raise HookError(f"--model {spec!r} returned ({got}); {HOOK_CONTRACT}.")
    return model, batch_fn, loss_fn


def check_batch(spec: str, step: int, batch: Any) -> Batch:
    """The (inputs, targets) pair of `batch_fn(step)`, or HookError naming what came back."""
    if (
        not isinstance(batch, (tuple, list))
        or len(batch) != 2
        or not all(isinstance(item, torch.Tensor) for item in batch)
    ):
        raise HookError(
            f"--model {spec!r}: batch_fn({step}) returned {describe(batch)}; it must return (inputs, targets), "
            "two tensors."
        )
    return batch[0], batch[1]


def describe(value: Any) -> str:
    """A few words for a value: its type, and its length or shape where it has one."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        inner = ", ".join(describe(item) for item in value[:4]) + (", ..." if len(value) > 4 else "")
        return f"{_a(type(value).__name__)} of {len(value)} ({inner})"
    if isinstance(value, nn.Module):
        return f"{_a(type(value).__name__)} module"
    if callable(value):
        return f"a function {getattr(value, '__name__', type(value).__name__)!r}"
    return "None" if value is None else _a(type(value).__name__)


def _a(noun: str) -> str:
    """`noun` with its indefinite article."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"
