"""The O1/O2 storage of a converted layer: each parameter in 16 bits, its gradient in FP8.

A :class:`CompactParameter` pairs a parameter's float16 storage (weights.HalfWeight) with its
FP8 gradient (grads.FP8Gradient). A :class:`CompactLayer` holds one for the weight and one
for the bias of a Float8Linear. A :class:`CompactGroup` is what one optimizer updates: the
once-per-step work (the overflow check, materialising for clipping or an O1 step, rounding
back, discarding a skipped step) over all of its compact parameters.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import NamedTuple

import torch

from accel.backends.native_fp8.data_parallel import average, world_size
from accel.backends.native_fp8.grads import FP8Gradient
from accel.backends.native_fp8.rounding import fp8_to_float
from accel.backends.native_fp8.weights import HalfWeight


class StepGradient(NamedTuple):
    """A parameter's gradient for the optimizer step: ``values * scale_inv``, where ``values`` is the
    FP8 store's own tensor (a fused kernel decodes it in its loop) or float32 with ``scale_inv`` 1."""

    values: torch.Tensor
    scale_inv: torch.Tensor

    @classmethod
    def of(cls, grad: torch.Tensor) -> StepGradient:
        """A float32 gradient, with scale 1."""
        return cls(grad, _unit_scale(grad.device))

    def real(self) -> torch.Tensor:
        """The gradient in float32 (``values`` itself when it is float32)."""
        if self.values.dtype == torch.float32:
            return self.values
        return fp8_to_float(self.values, self.scale_inv)


@functools.cache
def _unit_scale(device: torch.device) -> torch.Tensor:
    """A 0-dim float32 one on ``device``, shared (nothing writes into it)."""
    return torch.ones((), dtype=torch.float32, device=device)


class CompactParameter:
    """One parameter of a converted layer: float16 storage with a scale, and an FP8 gradient."""

    def __init__(self, param: torch.Tensor, generator: torch.Generator | None = None) -> None:
        self.param = param
        self.storage = HalfWeight(param)
        self.grad = FP8Gradient(param.device)
        self.generator = generator
        """Random bits for stochastic rounding (on the parameter's device); None rounds to nearest."""

    def materialise(self, grad: torch.Tensor | None) -> None:
        """float32 real values in ``param.data``, and ``grad`` (float32) added to ``param.grad``.

        What gradient clipping and an O1 optimizer step need. Idempotent: a gradient that
        arrives afterwards (another micro-batch) is added by the next call.
        """
        self.storage.materialise()
        if grad is not None:
            self.param.grad = grad if self.param.grad is None else self.param.grad.add_(grad)

    def take_gradient(self, grad: torch.Tensor | None) -> torch.Tensor | None:
        """The step's float32 gradient: ``param.grad`` (materialised, maybe clipped) plus ``grad``
        (from FP8 since then), leaving ``param.grad`` None."""
        held, self.param.grad = self.param.grad, None
        if held is None:
            return grad
        return held if grad is None else held.add_(grad)

    def finish_step(self, updated: bool) -> None:
        """End the step: round updated real values back into storage (stochastically), or restore it."""
        if updated and self.storage.materialised:
            self.storage.store(self.generator)
        else:
            self.storage.restore()
        self.param.grad = None
        self.grad.end_step()

    def to(self, device: torch.device) -> None:
        """Follow the parameter after a module-wide ``.to()`` / ``.float()``."""
        self.storage.keep_storage_dtype()
        self.grad.to(device)


class CompactLayer:
    """The compact weight (and bias) of one Float8Linear."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        self.weight = CompactParameter(weight)
        self.bias = None if bias is None else CompactParameter(bias)

    def set_generator(self, generator: torch.Generator | None) -> None:
        """The random bits stochastic rounding of this layer's parameters draws from."""
        for _, part in self.named():
            part.generator = generator

    def named(self) -> Iterator[tuple[str, CompactParameter]]:
        """``("weight", ...)`` and, if there is a bias, ``("bias", ...)``."""
        yield "weight", self.weight
        if self.bias is not None:
            yield "bias", self.bias


class CompactGroup:
    """The compact parameters one optimizer updates, each with the index of its param_group."""

    def __init__(self, optimizer: torch.optim.Optimizer, compact: Mapping[int, CompactParameter]) -> None:
        """``compact``: every compact parameter known, by ``id(param)``.

        Only indices into ``optimizer.param_groups`` are kept: ``load_state_dict`` replaces
        the group dicts, so hyperparameters must be read from the optimizer at each step.
        """
        self.params: list[CompactParameter] = []
        self.group_index: list[int] = []
        for index, param_group in enumerate(optimizer.param_groups):
            for param in param_group["params"]:
                if id(param) in compact:
                    self.params.append(compact[id(param)])
                    self.group_index.append(index)

    def __len__(self) -> int:
        return len(self.params)

    def found_nonfinite(self) -> torch.Tensor | None:
        """0-dim bool tensor: did any gradient of this step hold NaN or inf? None when empty."""
        if not self.params:
            return None
        amaxes = torch.stack([p.grad.step_amax for p in self.params])
        return ~torch.isfinite(amaxes).all()

    def collect_gradients(self) -> list[torch.Tensor | None]:
        """The FP8 gradients written since the last call, in float32, emptying the FP8 copies.

        With several processes they are averaged over them (one all-reduce), and a parameter
        without a gradient here gets zeros, so that every process reduces the same tensors.
        """
        grads = [param.grad.take() for param in self.params]
        if world_size() == 1:
            return grads
        filled = [
            torch.zeros(p.param.shape, dtype=torch.float32, device=p.param.device) if g is None else g
            for p, g in zip(self.params, grads)
        ]
        average(filled)
        return list(filled)

    def materialise(self) -> None:
        """Real values and gradients into ``param.data`` / ``param.grad`` (float32), for every parameter."""
        for param, grad in zip(self.params, self.collect_gradients()):
            param.materialise(grad)

    def take_gradients(self) -> list[torch.Tensor | None]:
        """Every parameter's float32 gradient of the step (see CompactParameter.take_gradient)."""
        return [param.take_gradient(grad) for param, grad in zip(self.params, self.collect_gradients())]

    def take_step_gradients(self) -> list[StepGradient | None]:
        """:meth:`take_gradients`, leaving the FP8 gradients undecoded where nothing else touched
        them (one process, not materialised for clipping): the fused steps read them as they are."""
        if world_size() > 1:
            return [None if grad is None else StepGradient.of(grad) for grad in self.take_gradients()]
        grads: list[StepGradient | None] = []
        for param in self.params:
            store = param.grad
            if param.param.grad is None and store.data is not None:
                grads.append(StepGradient(store.data, store.scale_inv))
                store.data = None
                continue
            grad = param.take_gradient(store.take())
            grads.append(None if grad is None else StepGradient.of(grad))
        return grads

    def drop_gradients(self) -> None:
        """zero_grad(): the FP8 gradients written since the last step are dropped (materialised
        values, from clipping, go back to their storage untouched)."""
        for param in self.params:
            if param.grad.data is not None or param.storage.materialised:
                param.finish_step(False)

    def discard(self) -> None:
        """A skipped step: storage as it was, gradients dropped."""
        for param in self.params:
            param.finish_step(False)
