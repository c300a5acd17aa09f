"""FP8RecipeKwargs(fp8_params=True) on TransformerEngine: FP8 weights in the modules, masters with the optimizer.

TE's `quantized_model_init` (TE 2.9 and newer; `fp8_model_init` before, deprecated since) makes
the TE modules built inside it hold only quantized copies of their weights, "for full model
training using an optimizer with master weights, where the high precision copies of weights are
already present in the optimizer" (TE's docstring). A plain torch optimizer has no master
weights, so accel keeps them: the optimizer steps the original high-precision weight Parameters
(the masters), TE's weight gradients are moved onto them before unscaling/clipping and the
step, and after every step that ran each FP8 weight is quantized anew from its master. Biases
stay high precision in TE and are stepped as they are.
"""

from __future__ import annotations

import weakref
from types import ModuleType
from typing import Any

import torch
from torch import nn

from accel.backends.fp8.te_api import TEApi


class MasterWeights:
    """The TE modules' FP8 weights and the high-precision masters the optimizer steps in their place."""

    def __init__(self, te: ModuleType, recipe: Any) -> None:
        entry = TEApi.of(te)
        if entry.model_init is None:
            raise ValueError(
                f"FP8RecipeKwargs(fp8_params=True) needs TransformerEngine's {entry.model_init_name}, which the "
                "installed TransformerEngine does not have; upgrade TransformerEngine, or leave fp8_params out."
            )
        self.api = entry.model_init_name
        """Which TE context builds the FP8 weights: 'quantized_model_init' (TE >= 2.9) or 'fp8_model_init'."""
        self._function = entry.model_init
        self._recipe = recipe
        self.masters: dict[int, tuple[nn.Parameter, nn.Parameter]] = {}
        """id(FP8 weight) -> (FP8 weight, its master)."""

    def init_context(self) -> Any:
        """The TE context in which a TE module is built with FP8 weights."""
        return self._function(enabled=True, recipe=self._recipe)

    def add(self, module: nn.Module, fp8_weight: nn.Parameter, master: nn.Parameter) -> None:
        """Make `master` (the replaced layer's weight) the master of `module.weight`, also for loaded state."""
        self.masters[id(fp8_weight)] = (fp8_weight, master)
        master_ref = weakref.ref(master)
        module.register_load_state_dict_pre_hook(_LoadIntoMaster(master_ref))

    def master_of(self, param: Any) -> Any:
        """The master of an FP8 weight; any other parameter as it is."""
        entry = self.masters.get(id(param))
        return entry[1] if entry is not None and entry[0] is param else param

    def remap(self, optimizer: torch.optim.Optimizer) -> None:
        """Point `optimizer` at the masters where it holds an FP8 weight (an optimizer built after prepare)."""
        for group in optimizer.param_groups:
            group["params"] = [self.master_of(p) for p in group["params"]]

    def move_gradients(self) -> None:
        """Add TE's weight gradients to the masters' (in the master's dtype) and drop them from the FP8 weights."""
        for fp8_weight, master in self.masters.values():
            grad = fp8_weight.grad
            if grad is None:
                continue
            fp8_weight.grad = None
            grad = grad.to(master.dtype)
            master.grad = grad if master.grad is None else master.grad.add_(grad)

    @torch.no_grad()
    def refresh(self) -> None:
        """Quantize every FP8 weight anew from its master (after an optimizer step that ran)."""
        for fp8_weight, master in self.masters.values():
            quantize = getattr(fp8_weight, "quantize_", None)
            if quantize is not None:
                quantize(master.detach())
            else:
                fp8_weight.copy_(master.detach())

    def state_dict_values(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """name -> master values, for the model's FP8 weights (what a checkpoint saves in their place)."""
        return {
            name: self.master_of(param).detach()
            for name, param in model.named_parameters()
            if id(param) in self.masters
        }


class _LoadIntoMaster:
    """A load_state_dict pre-hook: the loaded weight goes into the master exactly (TE then quantizes it)."""

    def __init__(self, master: weakref.ref[nn.Parameter]) -> None:
        self._master = master

    def __call__(self, module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        master, value = self._master(), state_dict.get(prefix + "weight")
        if master is not None and isinstance(value, torch.Tensor) and value.shape == master.shape:
            with torch.no_grad():
                master.copy_(value)
