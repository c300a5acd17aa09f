"""Where a model's memory comes from and where it goes: `init_module` builds a model on the device, in
the precision's dtype or on the meta device; `free_memory` (Accelerate's `clear`) forgets what was
prepared and empties the device's cache."""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from typing import Any

from accel._validation import check_optional_bool
from accel.training import meta_init
from accel.training.out_of_memory import release_memory


class MemoryMixin:
    """`init_module`, `free_memory`, `clear`."""

    process_state: Any
    device_placement: bool
    strategy: Any
    precision: Any
    quantizer: Any
    prepared: Any
    gradient_state: Any

    def free_memory(self, *objects: Any) -> list[None]:
        """Forget every prepared object (so they can be freed), collect garbage, empty the device cache.

        Also resets the accumulation step count. Used between trials (say by `find_executable_batch_size`).

        Args:
            *objects: References the caller holds, to be dropped: write `a, b = accelerator.free_memory(a, b)`.

        Returns:
            A None per object given.
        """
        self.prepared.forget_training_objects()
        self.gradient_state.step = 0
        return release_memory(*objects)

    def clear(self, *objects: Any) -> list[None]:
        """The same as `free_memory` (Accelerate's alias).

        Args:
            *objects: References the caller holds, to be dropped.

        Returns:
            A None per object given.
        """
        return self.free_memory(*objects)

    def init_module(self, empty_init: bool | None = None) -> AbstractContextManager[Any]:
        """A context in which a model is built on the device and directly in the precision's dtype.

        `empty_init=True` builds the parameters on the meta device (no memory, no initialisation):
        prepare gives them memory, sharded under FSDP2, and `reset_parameters()`; load real weights
        afterwards with `load_state`. None (default): on the meta device on every process but 0 under
        FSDP2's cpu_ram_efficient_loading (process 0's weights fill the shards at prepare), else real.

        Args:
            empty_init: True: parameters on the meta device; False: real parameters; None: as above.

        Returns:
            A context manager; build the model inside it.

        Example:
            ```python
            with accelerator.init_module(empty_init=True):
                model = MyModel()
            ```
        """
        check_optional_bool("init_module(empty_init)", empty_init)
        stack = contextlib.ExitStack()
        receives = self.strategy.builds_on_meta()
        if empty_init or (empty_init is None and receives):
            stack.enter_context(meta_init.build_on_meta(receives_weights=receives))
        device = self.process_state.public_device  # `accelerator.device`
        if self.device_placement and device.type != "cpu":
            stack.enter_context(device)
        stack.enter_context(self.precision.init_context())
        if self.quantizer is not None:
            stack.enter_context(self.quantizer.init_context())
        return stack
