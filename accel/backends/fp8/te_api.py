"""Which generation of TransformerEngine's entry points the installed TE has, decided in one place.

TE 2.9 renamed its two context managers and their keywords: ``te.autocast(enabled=, recipe=,
amax_reduction_group=)`` replaced ``te.fp8_autocast(enabled=, fp8_recipe=, fp8_group=)``, and
``te.quantized_model_init(enabled=, recipe=)`` replaced ``te.fp8_model_init`` (both old names stay,
deprecated). `TEApi.of` looks once at the installed module and every user of either context
(the forward's autocast, the FP8 weights' init) asks it, so the two can never disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

NEW_NAMES_SINCE = "2.9"
"""The TE release that added te.autocast and te.quantized_model_init."""


@dataclass(frozen=True)
class TEApi:
    """The installed TE's autocast and quantized-init functions with the keyword names they take.

    >>> import types
    >>> TEApi.of(types.SimpleNamespace(fp8_autocast=print, fp8_model_init=print)).autocast_name
    'fp8_autocast'
    """

    autocast: Callable[..., Any]
    autocast_name: str
    """'autocast' (TE >= 2.9) or 'fp8_autocast'."""
    recipe_keyword: str
    """autocast's keyword for the recipe: 'recipe' or 'fp8_recipe'."""
    group_keyword: str
    """autocast's keyword for the amax reduction group: 'amax_reduction_group' or 'fp8_group'."""
    model_init: Callable[..., Any] | None
    model_init_name: str
    """'quantized_model_init' (TE >= 2.9) or 'fp8_model_init' (both take enabled= and recipe=)."""

    @classmethod
    def of(cls, te: ModuleType) -> TEApi:
        """The entry points of `te` (transformer_engine.pytorch): the 2.9 names where present, else the old ones."""
        new = getattr(te, "autocast", None)
        if new is not None:
            return cls(new, "autocast", "recipe", "amax_reduction_group",
                       getattr(te, "quantized_model_init", None), "quantized_model_init")
        return cls(te.fp8_autocast, "fp8_autocast", "fp8_recipe", "fp8_group",
                   getattr(te, "fp8_model_init", None), "fp8_model_init")


class TEAutocast:
    """Opens TE's autocast for one recipe, in the API the installed TE has (`TEApi`).

    With several processes, `group` (the default process group) is where TE reduces the amaxes,
    so that every replica scales alike. A class, not a closure, so a prepared model stays picklable.
    """

    __slots__ = ("_function", "_arguments", "api")

    def __init__(self, te: ModuleType, recipe: Any, group: Any = None) -> None:
        entry = TEApi.of(te)
        self.api = entry.autocast_name
        """Which TE function opens the context: 'autocast' or 'fp8_autocast'."""
        self._function = entry.autocast
        self._arguments: dict[str, Any] = {entry.recipe_keyword: recipe}
        if group is not None:
            self._arguments[entry.group_keyword] = group

    def __call__(self, enabled: bool) -> Any:
        return self._function(enabled=enabled, **self._arguments)
