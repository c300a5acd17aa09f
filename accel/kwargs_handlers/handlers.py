"""Collect the `kwarg_handlers=` list into one object with a slot per handler type."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TypeVar, cast

from accel.kwargs_handlers.amp import AutocastKwargs, GradScalerKwargs
from accel.kwargs_handlers.base import KwargsHandler
from accel.kwargs_handlers.bitsandbytes import BitsandbytesKwargs
from accel.kwargs_handlers.fp8 import FP8RecipeKwargs
from accel.kwargs_handlers.monitoring import SpikeDetectionKwargs, ThroughputKwargs
from accel.kwargs_handlers.profile import ProfileKwargs
from accel.kwargs_handlers.torch_distributed import DistributedDataParallelKwargs, InitProcessGroupKwargs

HANDLER_TYPES: tuple[type[KwargsHandler], ...] = (
    AutocastKwargs,
    BitsandbytesKwargs,
    DistributedDataParallelKwargs,
    FP8RecipeKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    ProfileKwargs,
    SpikeDetectionKwargs,
    ThroughputKwargs,
)

H = TypeVar("H", bound=KwargsHandler)


@dataclasses.dataclass(frozen=True)
class Handlers:
    """The handlers a user gave, by type, and those the environment supplies.

    `get` prefers the user's handler, then the environment's (`accel launch` passes an FP8
    recipe as ACCEL_FP8_* variables), then the type's defaults. `has` counts only the user's.
    """

    given: dict[type[KwargsHandler], KwargsHandler] = dataclasses.field(default_factory=dict)
    environment: dict[type[KwargsHandler], KwargsHandler] = dataclasses.field(default_factory=dict)

    def get(self, kind: type[H]) -> H:
        """The handler of type `kind` the user gave, else the environment's, else `kind()`."""
        handler = self.given.get(kind) or self.environment.get(kind)
        # Both maps key each handler by its own type: what is found under kind is a kind.
        return cast(H, handler) if handler is not None else kind()

    def with_environment(self, *handlers: KwargsHandler | None) -> Handlers:
        """A copy that falls back on `handlers` (None entries are ignored) for types not given."""
        environment = {type(h): h for h in handlers if h is not None}
        return dataclasses.replace(self, environment=environment)

    def has(self, kind: type[KwargsHandler]) -> bool:
        """Whether the user gave a handler of type `kind`."""
        return kind in self.given

    def supplies(self, kind: type[KwargsHandler]) -> bool:
        """Whether the user or the environment (`accel launch`) gave a handler of type `kind`."""
        return kind in self.given or kind in self.environment


def collect_handlers(
    kwarg_handlers: Sequence[KwargsHandler] | None, kwargs_handlers: Sequence[KwargsHandler] | None
) -> Handlers:
    """Validate the handler list (either spelling, not both) and index it by type."""
    if kwarg_handlers is not None and kwargs_handlers is not None:
        raise ValueError(
            "Accelerator got both kwarg_handlers= and kwargs_handlers= (two spellings of one argument); "
            "pass the list once."
        )
    handlers = kwarg_handlers if kwarg_handlers is not None else kwargs_handlers
    if handlers is None:
        return Handlers()
    if not isinstance(handlers, (list, tuple)):
        raise TypeError(f"kwarg_handlers={handlers!r} must be a list of handler instances.")
    given: dict[type[KwargsHandler], KwargsHandler] = {}
    for handler in handlers:
        kind = _handler_type(handler)
        if kind in given:
            raise ValueError(
                f"kwarg_handlers has two {kind.__name__} instances ({given[kind]!r} and {handler!r}); "
                "give one per type."
            )
        given[kind] = handler
    return Handlers(given)


def _handler_type(handler: object) -> type[KwargsHandler]:
    accepted = ", ".join(t.__name__ for t in HANDLER_TYPES)
    if isinstance(handler, type):
        raise TypeError(
            f"kwarg_handlers got the class {handler.__name__}, not an instance; write {handler.__name__}(...). "
            f"Accepted types: {accepted}."
        )
    for kind in HANDLER_TYPES:
        if isinstance(handler, kind):
            return kind
    raise TypeError(
        f"kwarg_handlers got {handler!r} of type {type(handler).__name__}, which accel does not know; "
        f"accepted types: {accepted}."
    )
