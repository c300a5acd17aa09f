"""MS-AMP's optimization levels on the native backend: what the optimizer step does.

Both levels store the converted layers' weights in float16 with a power-of-two scale and
their gradients in FP8 (compact.py). They differ in who updates those parameters:

* **O1** works with any optimizer. For the step, the compact parameters are materialised
  (float32 values in ``param.data``, float32 gradients in ``param.grad``), the user's
  optimizer steps them like any other parameter (its state is created in float32), and
  the updated values are rounded back into storage stochastically. With torch's own Adam or
  AdamW on the CPU, those three stages are one fused kernel per parameter (fused_o1_adam.py),
  with the same state and the same random bits.
* **O2** needs torch's Adam or AdamW. The user's optimizer steps the other parameters; the
  compact ones are updated by adam.adam_step with an FP8 first moment and a float16 second
  moment, read from and written to the same optimizer's ``state``, with the hyperparameters
  of the param_group each belongs to, read at every step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch

from accel.backends.native_fp8 import fused_adam, fused_o1_adam
from accel.backends.native_fp8.adam import AdamHyper, adam_step
from accel.backends.native_fp8.compact import CompactGroup, CompactParameter, StepGradient

Closure = Callable[[], Any] | None


class OptimizationLevel:
    """How optimizer steps treat compact parameters; one instance per backend."""

    name: ClassVar[str] = ""

    def check_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Raise if ``optimizer`` cannot run at this level (called by prepare). Default: accept."""

    def step(self, optimizer: torch.optim.Optimizer, group: CompactGroup) -> None:
        """Step ``optimizer`` and update ``group``'s compact parameters (finishing their step)."""
        raise NotImplementedError


class O1(OptimizationLevel):
    """FP8 gradients and float16 weights; any optimizer, stepping on float32 copies made for the step."""

    name = "O1"

    def step(self, optimizer: torch.optim.Optimizer, group: CompactGroup) -> None:
        if not fused_o1_adam.accepts(optimizer):
            group.materialise()
            self._step_materialised(optimizer, group, group.params)
            return
        state = optimizer.state
        fused_params: list[tuple[CompactParameter, StepGradient, int]] = []
        others: list[CompactParameter] = []  # stepped by the optimizer, or (no gradient) not stepped
        for param, index, grad in zip(group.params, group.group_index, group.take_step_gradients()):
            if grad is None:
                others.append(param)
            elif fused_o1_adam.supports(param, state[param.param], grad.values):
                fused_params.append((param, grad, index))
            else:
                param.materialise(grad.real())  # the optimizer steps it below
                others.append(param)
        self._step_materialised(optimizer, group, others)
        if fused_params:
            decoupled = isinstance(optimizer, torch.optim.AdamW)
            hypers = [AdamHyper.of(param_group, decoupled) for param_group in optimizer.param_groups]
            for param, grad, index in fused_params:
                fused_o1_adam.adam_step(param, state[param.param], grad, hypers[index])
                param.finish_step(False)  # stored already: this ends the gradient's step

    @staticmethod
    def _step_materialised(
        optimizer: torch.optim.Optimizer, group: CompactGroup, params: list[CompactParameter]
    ) -> None:
        """The user's optimizer steps (the materialised ones of ``params`` among its other parameters);
        then ``params`` end their step: what it updated is rounded back into storage. If it raises,
        the whole group's step is discarded."""
        try:
            optimizer.step()
        except BaseException:
            group.discard()
            raise
        for param in params:
            param.finish_step(param.param.grad is not None)


class O2(OptimizationLevel):
    """O1's storage, and Adam/AdamW moments in FP8 (first) and float16 (second) for compact parameters."""

    name = "O2"

    def check_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        kind = type(optimizer)
        if not isinstance(optimizer, torch.optim.Adam) or kind.step not in (torch.optim.Adam.step, torch.optim.AdamW.step):
            raise ValueError(
                f"FP8RecipeKwargs(optimization_level='O2') got a {kind.__module__}.{kind.__qualname__} optimizer; "
                "O2 keeps Adam's moments in FP8 and float16, so it accepts torch.optim.Adam and torch.optim.AdamW "
                "only. Use optimization_level='O1', which works with any optimizer (FP8 gradients and float16 "
                "weights, the optimizer's own state in float32), or switch to AdamW."
            )
        for index, param_group in enumerate(optimizer.param_groups):
            if param_group.get("amsgrad"):
                raise ValueError(
                    f"FP8RecipeKwargs(optimization_level='O2') cannot run {kind.__name__}(amsgrad=True) (param_group "
                    f"{index}): its running maximum of the second moment has no place in O2's storage. Use "
                    "amsgrad=False, or optimization_level='O1'."
                )

    def step(self, optimizer: torch.optim.Optimizer, group: CompactGroup) -> None:
        grads = group.take_step_gradients()
        optimizer.step()
        decoupled = isinstance(optimizer, torch.optim.AdamW)
        hypers = [AdamHyper.of(param_group, decoupled) for param_group in optimizer.param_groups]
        state = optimizer.state
        for param, index, grad in zip(group.params, group.group_index, grads):
            if grad is not None:
                param_state = state[param.param]
                if fused_adam.supports(param, param_state, grad.values):
                    fused_adam.adam_step(param, param_state, grad, hypers[index])
                else:
                    adam_step(param, param_state, grad.real(), hypers[index])
            param.finish_step(grad is not None)


LEVELS: dict[str, type[OptimizationLevel]] = {"O1": O1, "O2": O2}
