"""The base of every kwargs handler: a frozen, keyword-only dataclass that validates itself.

A handler carries the options of one part of training (the GradScaler, autocast, FP8, ...).
It reads nothing from the environment: values come from the caller, and the command line
turns configuration into arguments before they get here.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import sys
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:
    from typing_extensions import dataclass_transform

from accel._validation import closest

H = TypeVar("H", bound="KwargsHandler")


class KwargsHandler:
    """Base class: `to_kwargs()`, `explicit_fields` and accepted alias spellings.

    Not itself a dataclass, so that a script's own handler may subclass it with a plain
    `@dataclass` (as in Accelerate) while accel's handlers are frozen ones.
    """

    aliases: ClassVar[Mapping[str, str]] = MappingProxyType({})
    if TYPE_CHECKING:
        # Every concrete handler is a dataclass (kwargs_handler or a script's @dataclass): this
        # lets the type checker accept dataclasses.fields(self) below.
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def to_dict(self) -> dict[str, Any]:
        """Every field and its value, deep-copied (Accelerate's `to_dict`)."""
        return {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def to_kwargs(self) -> dict[str, Any]:
        """The fields whose value differs from the class default (Accelerate's meaning)."""
        defaults = type(self)()
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(defaults, f.name)
        }

    @property
    def explicit_fields(self) -> frozenset[str]:
        """The fields the caller gave explicitly (under their own name or an alias)."""
        return getattr(self, "_explicit", frozenset())


@dataclass_transform(frozen_default=True, kw_only_default=True)
def kwargs_handler(aliases: Mapping[str, str] | None = None) -> Callable[[type[H]], type[H]]:
    """Make `cls` a frozen keyword-only dataclass that accepts `aliases` and rejects typos.

    `aliases` maps another spelling (for example Accelerate's) to the field's own name.
    """
    alias_map = MappingProxyType(dict(aliases or {}))

    def wrap(cls: type[H]) -> type[H]:
        cls = dataclasses.dataclass(frozen=True, kw_only=True)(cls)
        generated_init = cls.__init__
        names = [f.name for f in dataclasses.fields(cls)]

        @functools.wraps(generated_init)
        def __init__(self: H, **kwargs: Any) -> None:
            kwargs = _canonical_kwargs(cls.__name__, kwargs, names, alias_map)
            generated_init(self, **kwargs)
            object.__setattr__(self, "_explicit", frozenset(kwargs))

        cls.__init__ = __init__  # type: ignore[method-assign,assignment]  # replaces the generated __init__ on purpose
        cls.aliases = alias_map
        return cls

    return wrap


def _canonical_kwargs(
    owner: str, kwargs: dict[str, Any], names: list[str], aliases: Mapping[str, str]
) -> dict[str, Any]:
    """Rename alias keys to field names; raise on unknown keys and on a field given twice."""
    result: dict[str, Any] = {}
    for key, value in kwargs.items():
        name = aliases.get(key, key)
        if name not in names:
            guess = closest(key, [*names, *aliases])
            hint = f" Did you mean {guess!r}?" if guess else ""
            raise TypeError(f"{owner} got an unknown argument {key!r}; its fields are {', '.join(names)}.{hint}")
        if name in result:
            raise TypeError(f"{owner} got {name!r} twice (as {name!r} and as its alias); give it once.")
        result[name] = value
    return result
