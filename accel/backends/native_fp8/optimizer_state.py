"""Loading an optimizer's state_dict without torch casting the state of compact parameters.

``torch.optim.Optimizer.load_state_dict`` casts every floating-point state tensor to its
parameter's dtype. A compact parameter's dtype is its float16 storage, so torch would turn
O1's float32 moments into float16 and O2's FP8 first moment into float16 numbers. A pair of
load hooks, registered on the user's own optimizer, sets those entries aside before torch
processes the state and puts them back, moved to the parameter's device but uncast, after.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

IsCompact = Callable[[torch.Tensor], bool]


class StatePreserver:
    """Installs the load hooks on optimizers, once each; :meth:`remove` takes them off again."""

    def __init__(self, is_compact: IsCompact) -> None:
        self._is_compact = is_compact
        self._handles: dict[int, tuple[RemovableHandle, RemovableHandle]] = {}
        self._pending: dict[int, dict[torch.Tensor, dict[str, Any]]] = {}

    def install(self, optimizer: torch.optim.Optimizer) -> None:
        """Hook ``optimizer``'s load_state_dict (a second call for the same optimizer does nothing)."""
        if id(optimizer) in self._handles:
            return
        self._handles[id(optimizer)] = (
            optimizer.register_load_state_dict_pre_hook(self._set_aside),
            optimizer.register_load_state_dict_post_hook(self._put_back),
        )

    def remove(self) -> None:
        """Take every hook off."""
        for pre, post in self._handles.values():
            pre.remove()
            post.remove()
        self._handles.clear()

    def _set_aside(self, optimizer: torch.optim.Optimizer, state_dict: dict[str, Any]) -> None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        saved_ids = [i for group in state_dict.get("param_groups", ()) for i in group["params"]]
        saved_state = state_dict.get("state", {})
        kept: dict[torch.Tensor, dict[str, Any]] = {}
        if len(params) == len(saved_ids):  # otherwise torch raises its own error
            for saved_id, param in zip(saved_ids, params):
                if self._is_compact(param) and saved_id in saved_state:
                    kept[param] = saved_state[saved_id]
        self._pending[id(optimizer)] = kept

    def _put_back(self, optimizer: torch.optim.Optimizer) -> None:
        for param, saved in self._pending.pop(id(optimizer), {}).items():
            optimizer.state[param] = {key: _moved(key, value, param.device) for key, value in saved.items()}


def _moved(key: str, value: Any, device: torch.device) -> Any:
    """``value`` on ``device`` in its own dtype; torch's ``step`` stays where it is, as torch leaves it."""
    if not isinstance(value, torch.Tensor) or key == "step":
        return value
    return value.to(device)
