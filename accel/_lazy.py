"""Lazy re-exports for package ``__init__`` modules: a name's module loads when the name is first used.

A package that re-exports its modules' names eagerly makes every importer of any one of its modules
pay for all of them: ``accel.fsdp.plugin`` (a dataclass) used to bring ``torch.distributed.checkpoint``,
DTensor and sympy along with ``accel.fsdp.checkpoint``. With :func:`lazy_exports` the package keeps
its public names (``from accel.fsdp import consolidate`` works as before) and loads nothing until
one is asked for. The package lists the same names under ``if TYPE_CHECKING:`` so that type
checkers and editors see them; tests/test_imports.py checks that both lists agree.

Example::

    __getattr__, __dir__ = lazy_exports(__name__, {"consolidate": "accel.fsdp.checkpoint"})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package`` (PEP 562) for ``exports``.

    Args:
        package: the package's ``__name__``.
        exports: public name -> the module that defines it (absolute name).

    Returns:
        ``(__getattr__, __dir__)``: the first looks the name up in its module and caches it in the
        package's namespace (later reads are plain attribute reads); the second lists the names.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*exports, *vars(sys.modules[package])})

    return __getattr__, __dir__
