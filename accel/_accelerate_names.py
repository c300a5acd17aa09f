"""Accelerate names that accel does not implement, importable so that a script importing them still runs.

Two kinds (docs/migration.md lists every name and why):

* **Forwarded**: big-model inference (device maps, offloading, dispatch, hooks), which accel
  leaves to Accelerate. With accelerate installed these are Accelerate's own objects, which work
  on any torch model beside accel; without it, using one raises ImportError naming the install.
* **Refused**: what accel does otherwise or not at all (a tracker it does not ship, Accelerate's
  dispatching dataloader). Importing works; calling or instantiating raises NotImplementedError
  with the reason and what to do instead.

A module's ``__getattr__ = forwarding(...)`` or ``refusals(...)`` (PEP 562) serves the names, so
nothing of Accelerate is imported until a name is used.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

_INSTALL = "pip install accelerate"


def forwarding(module: str, names: frozenset[str] | None, here: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` giving Accelerate's ``module.<name>`` for `names` (None: any public name),
    or, without accelerate, a stand-in that raises ImportError when used; `here` is accel's module."""

    def getattr_(name: str) -> Any:
        if name.startswith("_") or (names is not None and name not in names):
            raise AttributeError(f"module {here!r} has no attribute {name!r}")
        if importlib.util.find_spec("accelerate") is None:
            return _needs_accelerate(f"{here}.{name}", f"{module}.{name}")
        value = getattr(importlib.import_module(module), name, _ABSENT)
        if value is _ABSENT:
            raise AttributeError(f"module {here!r} has no attribute {name!r} (nor has {module!r})")
        return value

    return getattr_


_ABSENT = object()


def _needs_accelerate(name: str, theirs: str) -> Callable[..., NoReturn]:
    def needs_accelerate(*args: Any, **kwargs: Any) -> NoReturn:
        raise ImportError(
            f"{name} is Accelerate's {theirs}: big-model inference (device maps, offloading, dispatch), which accel "
            f"leaves to Accelerate. Install it ({_INSTALL}) and accel gives you Accelerate's own."
        )

    needs_accelerate.__name__ = needs_accelerate.__qualname__ = name.rsplit(".", 1)[-1]
    return needs_accelerate


def refusals(reasons: Mapping[str, str], here: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` giving, for each name in `reasons`, a class whose construction (or a
    function whose call) raises NotImplementedError saying why accel lacks it."""

    def getattr_(name: str) -> Any:
        if name not in reasons:
            raise AttributeError(f"module {here!r} has no attribute {name!r}")
        return _refused(f"{here}.{name}", reasons[name])

    return getattr_


@functools.cache
def _refused(name: str, reason: str) -> type:
    """A class standing for `name`: isinstance() is always False, building one raises."""

    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(f"{name} is not supported by accel: {reason}")

    short = name.rsplit(".", 1)[-1]
    namespace = {"__new__": refuse, "__doc__": f"Not supported by accel: {reason}", "__module__": name.rsplit(".", 1)[0],
                 "__accel_refused__": reason}
    return type(short, (), namespace)


def is_refused(value: Any) -> bool:
    """Whether `value` is one of accel's refusing stand-ins (what docs/migration.md marks not supported)."""
    return getattr(value, "__accel_refused__", None) is not None
