"""Helpers shared by the FP8 backends that wrap a library: is it installed, which version, and
which recipe fields a backend runs at one fixed value.

Nothing here imports the libraries themselves: TransformerEngine and MS-AMP cannot even be
imported without CUDA, so a backend asks these questions before it imports anything.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType

from accel.kwargs_handlers import FP8RecipeKwargs


def module_present(name: str) -> bool:
    """Whether `import name` can find the module (without importing it)."""
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def library_version(module: ModuleType | None, distributions: Iterable[str]) -> str | None:
    """The version of an installed library: the module's `__version__`, else its distribution's."""
    version = getattr(module, "__version__", None) if module is not None else None
    if isinstance(version, str):
        return version
    for distribution in distributions:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def version_tuple(version: str) -> tuple[int, ...]:
    """'2.9.0.dev0+abc' -> (2, 9, 0): the leading numeric release parts."""
    parts: list[int] = []
    for piece in version.split("+")[0].split("."):
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break
    return tuple(parts)


def too_old_reason(library: str, version: str | None, minimum: tuple[int, ...], install: str) -> str | None:
    """Why `version` of `library` is too old for accel (None when it is recent enough)."""
    if version is None:
        return None
    if version_tuple(version) >= minimum:
        return None
    wanted = ".".join(map(str, minimum))
    return f"{library} {version} is installed, accel needs {wanted} or newer ({install})"


def check_fixed_fields(recipe: FP8RecipeKwargs, fixed: Mapping[str, object], library: str, why: str) -> None:
    """Raise for a field set explicitly to another value than the one `library` always runs."""
    wrong = {
        name: value
        for name, value in fixed.items()
        if name in recipe.explicit_fields and getattr(recipe, name) != value
    }
    if not wrong:
        return
    asked = ", ".join(f"{name}={getattr(recipe, name)!r}" for name in wrong)
    runs = ", ".join(f"{name}={value!r}" for name, value in wrong.items())
    raise ValueError(
        f"FP8RecipeKwargs({asked}) cannot run on the {library!r} FP8 backend: it always runs {runs} "
        f"({why}). Remove the field, or choose a backend that honours it (docs/fp8-backends.md)."
    )


def cuda_library_reason(
    library: str, missing: str | None, no_fp8_gpu: str | None, load: Callable[[], object]
) -> str | None:
    """Why a CUDA FP8 library cannot run: not installed (`missing`), no FP8 GPU (`no_fp8_gpu`), or it
    fails to import; None when `load()` gives the module. Shared by the te and msamp backends."""
    reasons = [r for r in (missing, no_fp8_gpu) if r]
    if reasons:
        return "; ".join(reasons)
    try:
        load()
    except Exception as error:  # a broken install raises anything (OSError, RuntimeError, ImportError, ...)
        return f"{library} is installed but does not import: {type(error).__name__}: {error}"
    return None
