"""DummyOptim and DummyScheduler: stand-ins a script prepares when the DeepSpeed config names the optimizer
and scheduler (Accelerate's names and fields). prepare hands their parameters and values to
`deepspeed.initialize`, which builds the real ones from the config."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


class DummyOptim:
    """The parameters (or groups) and the learning rate for the optimizer of the DeepSpeed config.

    Example: `optimizer = DummyOptim(model.parameters(), lr=3e-4)` with `"optimizer": {"type": "AdamW", ...}`
    in the JSON; its lr and weight_decay fill the JSON's "auto" values.
    """

    def __init__(self, params: Iterable[Any], lr: float = 0.001, weight_decay: float = 0, **kwargs: Any) -> None:
        self.params = params
        self.lr = lr
        self.weight_decay = weight_decay
        self.kwargs = kwargs


class DummyScheduler:
    """The schedule for the scheduler of the DeepSpeed config, or `lr_scheduler_callable(optimizer)` building one.

    Example: `DummyScheduler(optimizer, total_num_steps=1000, warmup_num_steps=100)` with
    `"scheduler": {"type": "WarmupDecayLR", ...}` in the JSON.
    """

    def __init__(
        self, optimizer: Any, total_num_steps: int | None = None, warmup_num_steps: int = 0,
        lr_scheduler_callable: Callable[[Any], Any] | None = None, **kwargs: Any,
    ) -> None:
        self.optimizer = optimizer
        self.total_num_steps = total_num_steps
        self.warmup_num_steps = warmup_num_steps
        self.lr_scheduler_callable = lr_scheduler_callable
        self.kwargs = kwargs
