"""Gradient accumulation (which micro-batches end with an optimizer step) and the prepared
dataloaders being iterated (Accelerate's `GradientState`).

accel keeps no process-wide singleton: each Accelerator has its own GradientState. What a script
gets from `GradientState()` (Accelerate's `accelerate.state.GradientState()`, which returns the
shared state) is the *current* one: that of the most recently built Accelerator that is still
alive (more precisely, the GradientState most recently built with an explicit `num_steps`, which
only an Accelerator does in a training script). With no current one, `GradientState()` builds a
fresh one (1 step, no dataloader) that becomes current. `GradientState(gradient_accumulation_plugin=p)`
returns the current one with the plugin's values applied, as Accelerate's updates its shared state.
`GradientState._reset_state()` forgets the current one (Accelerate's test helper).
"""

from __future__ import annotations

import weakref
from typing import Any, ClassVar

from accel.training.accumulation import GradientAccumulationPlugin


class GradientState:
    """Shared by the Accelerator, its optimizers, schedulers and dataloaders.

    `sync_gradients` is True on the micro-batch that completes an accumulation window (and on
    the last batch of a prepared dataloader, unless `sync_with_dataloader` is False); the
    optimizer, scheduler and `zero_grad` act only then.

    Accelerate's read-only attributes: `end_of_dataloader`, `remainder`, `active_dataloader`,
    `dataloader_references`, `in_dataloader` (all about the innermost prepared dataloader being
    iterated, see their docstrings), `adjust_scheduler`, `plugin_kwargs`, `initialized`,
    `is_xla_gradients_synced`.
    """

    _current: ClassVar[weakref.ReferenceType[GradientState] | None] = None

    num_steps: int
    sync_with_dataloader: bool
    adjust_scheduler: bool
    step: int
    sync_gradients: bool
    _refs: list[weakref.ReferenceType[Any]]
    _is_xla_gradients_synced: bool

    def __new__(
        cls,
        num_steps: int | GradientAccumulationPlugin | None = None,
        sync_with_dataloader: bool | None = None,
        *,
        gradient_accumulation_plugin: GradientAccumulationPlugin | None = None,
    ) -> GradientState:
        """`GradientState(num_steps, sync_with_dataloader)` builds a new state (the Accelerator's call);
        `GradientState()` / `GradientState(gradient_accumulation_plugin=...)` give the current one (module docstring)."""
        if isinstance(num_steps, GradientAccumulationPlugin):
            num_steps, gradient_accumulation_plugin = None, num_steps
        if num_steps is not None:
            if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
                raise ValueError(f"GradientState(num_steps={num_steps!r}) is not accepted; give an int >= 1.")
            state = cls._fresh(num_steps, True if sync_with_dataloader is None else sync_with_dataloader)
        else:
            current = cls._current() if cls._current is not None else None
            state = current if current is not None else cls._fresh(1, True)
            if sync_with_dataloader is not None:
                state.sync_with_dataloader = sync_with_dataloader
        if gradient_accumulation_plugin is not None:
            state._apply_plugin(gradient_accumulation_plugin)
        return state

    @classmethod
    def _fresh(cls, num_steps: int, sync_with_dataloader: bool) -> GradientState:
        state = object.__new__(cls)
        state.num_steps = num_steps
        state.sync_with_dataloader = sync_with_dataloader
        """False: the last batch of a dataloader does not end the window (GradientAccumulationPlugin)."""
        state.adjust_scheduler = True
        """Move a prepared scheduler's step counter on micro-batches that do not sync (GradientAccumulationPlugin)."""
        state.step = 0
        state.sync_gradients = True
        state._refs = []
        state._is_xla_gradients_synced = False
        GradientState._current = weakref.ref(state)
        return state

    def _apply_plugin(self, plugin: GradientAccumulationPlugin) -> None:
        if not isinstance(plugin, GradientAccumulationPlugin):
            raise TypeError(
                f"GradientState(gradient_accumulation_plugin={plugin!r}): give a GradientAccumulationPlugin "
                "(from accel.utils import GradientAccumulationPlugin) or None."
            )
        if plugin.num_steps is not None:
            self.num_steps = plugin.num_steps
        self.sync_with_dataloader = plugin.sync_with_dataloader
        self.adjust_scheduler = plugin.adjust_scheduler

    def advance(self) -> bool:
        """Count one micro-batch and decide whether it syncs; returns `sync_gradients`."""
        self.step += 1
        if (self.end_of_dataloader and self.sync_with_dataloader) or self.step >= self.num_steps:
            self.step = 0
            self.sync_gradients = True
        else:
            self.sync_gradients = False
        return self.sync_gradients

    # ----------------------------------------------------------------- the dataloaders being iterated
    @property
    def dataloader_references(self) -> list[Any]:
        """The prepared dataloaders being iterated, outermost first, after a leading None (Accelerate's list)."""
        return [None] + [ref() for ref in self._refs]

    @property
    def active_dataloader(self) -> Any:
        """The innermost prepared dataloader being iterated, or None outside every loop over one."""
        for ref in reversed(self._refs):
            loader = ref()
            if loader is not None:
                return loader
        return None

    @property
    def in_dataloader(self) -> bool:
        """True while a prepared dataloader is being iterated."""
        return self.active_dataloader is not None

    @property
    def end_of_dataloader(self) -> bool:
        """True while the last batch of the active dataloader's epoch is in use (False outside a loop)."""
        active = self.active_dataloader
        return False if active is None else bool(active.end_of_dataloader)

    @property
    def remainder(self) -> int:
        """The active dataloader's `remainder`: how many samples of its epoch's last global batch are real
        (its total length modulo the batch size over all processes; 0: the last batch is full), or -1 when
        unknown or outside a loop. Accelerate's docstring calls this "extra samples added", but its value,
        and what Accelerate's own gather_for_metrics does with it (keep the first `remainder` rows), is this."""
        active = self.active_dataloader
        return -1 if active is None else int(active.remainder)

    def _add_dataloader(self, dataloader: Any) -> None:
        """Called by a prepared dataloader as it starts an epoch."""
        self._refs.append(weakref.ref(dataloader))

    def _remove_dataloader(self, dataloader: Any) -> None:
        """Called by a prepared dataloader when its epoch ends (or the loop over it is left)."""
        for index in range(len(self._refs) - 1, -1, -1):
            if self._refs[index]() is dataloader or self._refs[index]() is None:
                del self._refs[index]
                return

    # ----------------------------------------------------------------- Accelerate's other names
    @property
    def initialized(self) -> bool:
        """Always True: a GradientState exists only initialized."""
        return True

    @property
    def plugin_kwargs(self) -> dict[str, Any]:
        """The accumulation settings, as GradientAccumulationPlugin field names."""
        return {"num_steps": self.num_steps, "adjust_scheduler": self.adjust_scheduler,
                "sync_with_dataloader": self.sync_with_dataloader}

    @property
    def is_xla_gradients_synced(self) -> bool:
        """Accelerate's XLA flag; accel does not run on XLA, so nothing reads it but scripts."""
        return self._is_xla_gradients_synced

    @is_xla_gradients_synced.setter
    def is_xla_gradients_synced(self, is_synced: bool) -> None:
        self._is_xla_gradients_synced = is_synced

    def _set_sync_gradients(self, sync_gradients: bool) -> None:
        """Accelerate's private setter, kept for scripts that call it."""
        self.sync_gradients = sync_gradients

    @staticmethod
    def _reset_state() -> None:
        """Forget the current state: the next `GradientState()` builds a fresh one (Accelerate's test helper)."""
        GradientState._current = None

    def __reduce__(self) -> tuple[Any, ...]:
        # A copy is never iterating a dataloader and never becomes the current state.
        state = {k: v for k, v in self.__dict__.items() if k != "_refs"}
        return (_rebuild, (state,))

    def __repr__(self) -> str:
        return (
            f"Sync Gradients: {self.sync_gradients}\nAt end of current dataloader: {self.end_of_dataloader}\n"
            f"Extra samples added: {self.remainder}\nGradient accumulation plugin: {self.plugin_kwargs}\n"
        )


def _rebuild(state: dict[str, Any]) -> GradientState:
    """A GradientState from pickled attributes (see __reduce__)."""
    rebuilt = object.__new__(GradientState)
    rebuilt.__dict__.update(state)
    rebuilt._refs = []
    return rebuilt
