"""Accelerate's handler attributes (`accelerator.ddp_handler`, `accelerator.fp8_recipe_handler`, ...):
read-only views of the handlers in effect, for scripts that print or branch on them.

Each of `ddp_handler`, `scaler_handler`, `init_handler`, `autocast_handler` and `profile_handler` is
the handler of its type given to the constructor (or supplied by `accel launch`), else None, as in
Accelerate. accel has one FP8 recipe type: `fp8_recipe_handler` is the FP8RecipeKwargs in effect
where mixed_precision is fp8 (given, from `accel launch`/the config file, or the defaults), else
None; `te_recipe_handler`, `ao_recipe_handler` and `msamp_recipe_handler` are that same recipe
where that library runs FP8 (so one of them, or none for the native backend), else None.
"""

from __future__ import annotations

from typing import Generic, TypeVar, overload

from accel.backends.base import PrecisionBackend
from accel.kwargs_handlers import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    FP8RecipeKwargs,
    GradScalerKwargs,
    Handlers,
    InitProcessGroupKwargs,
    KwargsHandler,
    ProfileKwargs,
)

H = TypeVar("H", bound=KwargsHandler)


class _ReadOnly:
    """Assigning one of these attributes raises: the handlers are fixed at construction (an assignment
    that changed nothing would be silently ignored)."""

    name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __set__(self, accelerator: object, value: object) -> None:
        raise AttributeError(
            f"accelerator.{self.name} is read-only in accel: the handlers are fixed when the Accelerator is built. "
            "Pass the handler in Accelerator(kwarg_handlers=[...]) instead."
        )


class _HandlerOf(_ReadOnly, Generic[H]):
    """A read-only attribute: the handler of type `kind` given (or supplied by the launcher), else None."""

    def __init__(self, kind: type[H]) -> None:
        self.kind = kind

    @overload
    def __get__(self, accelerator: None, owner: type) -> _HandlerOf[H]: ...
    @overload
    def __get__(self, accelerator: HandlerViewsMixin, owner: type) -> H | None: ...
    def __get__(self, accelerator: HandlerViewsMixin | None, owner: type) -> H | None | _HandlerOf[H]:
        if accelerator is None:
            return self
        handlers = accelerator.handlers
        return handlers.get(self.kind) if handlers.supplies(self.kind) else None


class _RecipeOf(_ReadOnly):
    """A read-only attribute: the FP8 recipe in effect where FP8 runs on `library` ("" for any), else None."""

    def __init__(self, library: str) -> None:
        self.library = library

    @overload
    def __get__(self, accelerator: None, owner: type) -> _RecipeOf: ...
    @overload
    def __get__(self, accelerator: HandlerViewsMixin, owner: type) -> FP8RecipeKwargs | None: ...
    def __get__(self, accelerator: HandlerViewsMixin | None, owner: type) -> FP8RecipeKwargs | None | _RecipeOf:
        if accelerator is None:
            return self
        in_effect = accelerator.precision.fp8_recipe_in_effect
        if in_effect is None or self.library not in ("", in_effect[0]):
            return None
        return in_effect[1]


class HandlerViewsMixin:
    """`ddp_handler`, `scaler_handler`, `init_handler`, `autocast_handler`, `profile_handler`,
    `fp8_recipe_handler`, `te_recipe_handler`, `ao_recipe_handler`, `msamp_recipe_handler`.

    >>> from accel import Accelerator, FP8RecipeKwargs
    >>> recipe = FP8RecipeKwargs(backend="native")
    >>> accelerator = Accelerator(mixed_precision="fp8", kwarg_handlers=[recipe])
    >>> accelerator.fp8_recipe_handler is recipe, accelerator.te_recipe_handler, accelerator.ddp_handler
    (True, None, None)
    """

    handlers: Handlers
    precision: PrecisionBackend

    ddp_handler = _HandlerOf(DistributedDataParallelKwargs)
    """The DistributedDataParallelKwargs given (or from `accel launch`), else None; read-only."""
    scaler_handler = _HandlerOf(GradScalerKwargs)
    """The GradScalerKwargs given, else None; read-only."""
    init_handler = _HandlerOf(InitProcessGroupKwargs)
    """The InitProcessGroupKwargs given, else None; read-only."""
    autocast_handler = _HandlerOf(AutocastKwargs)
    """The AutocastKwargs given, else None; read-only."""
    profile_handler = _HandlerOf(ProfileKwargs)
    """The ProfileKwargs given, else None; read-only."""
    fp8_recipe_handler = _RecipeOf("")
    """The FP8RecipeKwargs in effect where mixed_precision is fp8 (given, from `accel launch`, or the defaults), else None."""
    te_recipe_handler = _RecipeOf("te")
    """That FP8 recipe where TransformerEngine runs FP8, else None."""
    ao_recipe_handler = _RecipeOf("ao")
    """That FP8 recipe where torchao runs FP8, else None."""
    msamp_recipe_handler = _RecipeOf("msamp")
    """That FP8 recipe where MS-AMP runs FP8, else None."""
