"""Float32 master weights for mixed precision: a model's trainable 16-bit parameters made float32 at prepare.

transformers loads a checkpoint in the dtype it was saved in, so a model often arrives in bf16.
Mixed precision (fp16, bf16, and FP8 over either) means the optimizer steps float32 weights while
the matrix products run in 16 bits under autocast; a bf16 model trained as it came would step bf16
weights and keep bf16 optimizer state while `accelerator.mixed_precision` says "bf16" (mixed).
So `prepare` makes every trainable parameter of a 16-bit floating dtype float32, in place: the same
Parameter object (its `.data`, and its `.grad` if any, replaced), so an optimizer built before
`prepare` steps it. Frozen parameters (a LoRA base, quantized weights) and buffers stay as they are.

An optimizer that already holds 16-bit state for such a parameter (it has stepped, or, like
Adagrad, makes its state when built) cannot follow: its state would no longer match its weights.
`prepare` then refuses before changing anything (or, for an optimizer prepared after its model,
as soon as it sees it), naming the dtype and the `-true` precision that trains 16-bit weights on
purpose.

>>> model = torch.nn.Linear(2, 2).to(torch.bfloat16)
>>> masters = MasterWeights("bf16")
>>> [(record.name, record.dtype) for record in masters.keep(model)]
[('weight', torch.bfloat16), ('bias', torch.bfloat16)]
>>> model.weight.dtype
torch.float32
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import torch
from torch import nn

from accel._warnings import warn_once

LOW_PRECISION: frozenset[torch.dtype] = frozenset({torch.float16, torch.bfloat16})
"""The dtypes a trainable parameter is made float32 from (fp32 and fp64 ones stay as they are)."""

TRUE_PRECISION: dict[torch.dtype, str] = {torch.bfloat16: "bf16-true", torch.float16: "16-true"}
"""The precision that trains weights of each dtype directly, on purpose (named in refusals)."""


class UpcastParameter(NamedTuple):
    """A parameter `prepare` made a float32 master: its name in its model, the dtype it had, its size."""

    name: str
    dtype: torch.dtype
    numel: int


class MasterWeights:
    """Makes and remembers the float32 masters of one mixed-precision backend (named `precision`)."""

    def __init__(self, precision: str) -> None:
        self.precision = precision
        self.upcast: list[UpcastParameter] = []
        """Every parameter made float32 so far, in the order of the models prepared."""
        self._made: dict[int, tuple[weakref.ref[nn.Parameter], UpcastParameter]] = {}

    def check(self, modules: Sequence[nn.Module], optimizers: Iterable[torch.optim.Optimizer]) -> None:
        """Raise ValueError, before `keep` changes anything, when one of `optimizers` holds state in the
        old dtype for a parameter of `modules` that `keep` would make float32."""
        targets = {id(p): UpcastParameter(name, p.dtype, p.numel()) for m in modules for name, p in _trainable_low(m)}
        if targets:
            for optimizer in optimizers:
                self._check_state(optimizer, targets)

    def keep(self, module: nn.Module) -> list[UpcastParameter]:
        """Make `module`'s trainable 16-bit parameters float32 in place, say so once, and return them."""
        params = _trainable_low(module)
        made = [UpcastParameter(name, p.dtype, p.numel()) for name, p in params]
        if not made:
            return made
        with torch.no_grad():
            for (_, param), record in zip(params, made):
                _upcast(param)
                self._made[id(param)] = (weakref.ref(param), record)
        self.upcast.extend(made)
        warn_once(self._message(made))
        return made

    def check_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Raise ValueError when `optimizer` (prepared after its model) holds state in the dtype a
        parameter had before `keep` made it float32."""
        made = {key: record for key, (ref, record) in self._made.items() if ref() is not None}
        if made:
            self._check_state(optimizer, made, after=True)

    def _check_state(self, optimizer: torch.optim.Optimizer, targets: dict[int, UpcastParameter], after: bool = False) -> None:
        stale: list[UpcastParameter] = []
        keys: set[str] = set()
        for group in optimizer.param_groups:
            for param in group["params"]:
                record = targets.get(id(param))
                found = _keys_in_dtype(optimizer.state.get(param), record.dtype) if record is not None else []
                if record is not None and found:
                    stale.append(record)
                    keys.update(found)
        if stale:
            raise ValueError(self._refusal(type(optimizer).__name__, stale, sorted(keys), after))

    def _message(self, made: list[UpcastParameter]) -> str:
        dtypes = ", ".join(sorted({str(record.dtype) for record in made}))
        true = " or ".join(self._true_precision(d) for d in sorted({r.dtype for r in made}, key=str))
        return (
            f"mixed_precision={self.precision!r} steps float32 master weights: prepare made {len(made)} trainable "
            f"{dtypes} parameter(s) ({sum(r.numel for r in made):,} values) float32 in place; the forward still runs "
            f"in 16 bits under autocast, frozen parameters and buffers keep their dtype, and saved weights are "
            f"float32. To train the 16-bit weights themselves, use {true}."
        )

    def _refusal(self, optimizer: str, stale: list[UpcastParameter], keys: list[str], after: bool) -> str:
        dtype = stale[0].dtype
        state = ", ".join(map(repr, keys))
        done = "made" if after else "would make"
        return (
            f"prepare: mixed_precision={self.precision!r} steps float32 master weights, so it {done} the model's "
            f"trainable {dtype} parameters float32 in place, but {optimizer} already holds {dtype} state ({state}) for "
            f"{len(stale)} of them (first: {stale[0].name!r}), which would no longer match its weights. Prepare the "
            "model and the optimizer before the optimizer's first step (an optimizer that makes its state when built, "
            f"such as Adagrad, after prepare(model)). To train {dtype} weights directly, on purpose, use "
            f"{self._true_precision(dtype)}."
        )

    def _true_precision(self, dtype: torch.dtype) -> str:
        """The setting that trains `dtype` weights directly: the `-true` precision, or for FP8 its base."""
        if self.precision == "fp8":
            return f"FP8RecipeKwargs(base_precision={TRUE_PRECISION[dtype]!r})"
        return f"mixed_precision={TRUE_PRECISION[dtype]!r}"


def _trainable_low(module: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """`module`'s trainable parameters of a 16-bit floating dtype (each once, under its first name)."""
    return [(name, p) for name, p in module.named_parameters() if p.requires_grad and p.dtype in LOW_PRECISION]


def _upcast(param: nn.Parameter) -> None:
    """Make `param` float32 in place: the same Parameter object, with its gradient (if any) float32 too."""
    grad = param.grad
    param.grad = None
    param.data = param.data.float()
    if grad is not None:
        param.grad = grad.float()


def _keys_in_dtype(state: dict[str, object] | None, dtype: torch.dtype) -> list[str]:
    """The keys of an optimizer's per-parameter `state` whose tensors are of `dtype`."""
    if not state:
        return []
    return [key for key, value in state.items() if isinstance(value, torch.Tensor) and value.dtype == dtype]
