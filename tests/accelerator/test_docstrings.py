"""Every public parameter is documented where a user reads it: `help()`, an editor, the API reference.

The convention (Google style, as Accelerate; the reference in docs/reference/ is built from it by
mkdocstrings, `mkdocs build --strict` in CI):

- a public method's parameters are listed in its own docstring's `Args:` section, `*args` and
  `**kwargs` included (written `*args`, `**kwargs`, or without the stars);
- a class's constructor parameters are listed in the class docstring's `Args:` section, except for a
  dataclass (the kwargs handlers, the plugins, the configurations): each constructor field carries an
  attribute docstring, the string literal on the line after the field, which mkdocstrings renders
  beside the field. A dataclass's `Args:` is not accepted instead, so the two never disagree;
- every public property has a docstring;
- the methods a training script uses most show an example (an `Example:` or `Examples:` section).

Checked for the Accelerator and every class `from accel import ...` gives (`accel.__all__`): each
method, property and field defined by accel (what a class inherits from torch or the standard library
is documented there).
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import re
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import accel
from accel import Accelerator

EXAMPLED = (
    "prepare", "backward", "accumulate", "autocast", "clip_grad_norm_", "gather_for_metrics", "save_state", "load_state",
    "log", "wait_for_everyone", "main_process_first", "unwrap_model",
)
"""The Accelerator methods a script uses most: each shows an example."""

_ENTRY = re.compile(r"^(\*{0,2}\w+)\s*(\([^)]*\))?\s*:")


def _classes() -> list[type]:
    found = [getattr(accel, name) for name in accel.__all__]
    return [value for value in found if inspect.isclass(value)]


CLASSES = _classes()


def _own(cls: type) -> list[type]:
    """The classes of `cls`'s MRO that accel defines (what it inherits from elsewhere is documented there)."""
    return [klass for klass in cls.__mro__ if klass.__module__.split(".")[0] == "accel"]


def section(doc: str | None, title: str = "Args") -> list[str]:
    """The names a Google-style section lists (`name: ...` or `name (type): ...`, one indent in)."""
    lines = inspect.cleandoc(doc or "").splitlines()
    try:
        start = lines.index(f"{title}:") + 1
    except ValueError:
        return []
    body: list[str] = []
    for line in lines[start:]:
        if line.strip() and not line.startswith((" ", "\t")):
            break
        body.append(line)
    names = []
    for line in textwrap.dedent("\n".join(body)).splitlines():
        match = _ENTRY.match(line)
        if match and not line.startswith((" ", "\t")):
            names.append(match.group(1))
    return names


def _spellings(parameter: inspect.Parameter) -> set[str]:
    if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
        return {parameter.name, f"*{parameter.name}"}
    if parameter.kind is inspect.Parameter.VAR_KEYWORD:
        return {parameter.name, f"**{parameter.name}"}
    return {parameter.name}


def _parameters(function: Callable[..., Any], bound: bool) -> list[inspect.Parameter]:
    parameters = list(inspect.signature(function).parameters.values())
    return parameters[1:] if bound else parameters


def _undocumented(parameters: list[inspect.Parameter], documented: list[str]) -> list[str]:
    return [p.name for p in parameters if not _spellings(p) & set(documented)]


def _methods(cls: type) -> Iterator[tuple[str, Callable[..., Any], bool]]:
    """(name, function, takes self or cls first) for every public method accel defines on `cls`."""
    seen: set[str] = set()
    for klass in _own(cls):
        for name, value in vars(klass).items():
            if name.startswith("_") or name in seen:
                continue
            seen.add(name)
            if isinstance(value, staticmethod):
                yield name, value.__func__, False
            elif isinstance(value, classmethod):
                yield name, value.__func__, True
            elif inspect.isfunction(value):
                yield name, value, True


def _properties(cls: type) -> Iterator[tuple[str, property]]:
    seen: set[str] = set()
    for klass in _own(cls):
        for name, value in vars(klass).items():
            if not name.startswith("_") and isinstance(value, property) and name not in seen:
                seen.add(name)
                yield name, value


def field_docstrings(cls: type) -> dict[str, str]:
    """Each field's attribute docstring (the string on the line after `name: type = ...`), over the MRO."""
    found: dict[str, str] = {}
    for klass in reversed(_own(cls)):
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        body = tree.body[0].body  # type: ignore[attr-defined]
        for node, after in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
                found[node.target.id] = after.value.value
    return found


def _constructor_gaps(cls: type) -> list[str]:
    if dataclasses.is_dataclass(cls):
        documented = field_docstrings(cls)
        fields = [f.name for f in dataclasses.fields(cls) if f.init]
        missing = [name for name in fields if not documented.get(name, "").strip()]
        return [f"{cls.__name__} field {name!r} has no docstring" for name in missing]
    if issubclass(cls, (enum.Enum, BaseException, Warning)) or not any("__init__" in vars(k) for k in _own(cls)):
        return []
    owner = next(k for k in _own(cls) if "__init__" in vars(k))
    missing = _undocumented(_parameters(owner.__init__, bound=True), section(owner.__doc__))  # type: ignore[misc]
    return [f"{owner.__name__}(...) parameter {name!r} is not in the class docstring's Args:" for name in missing]


def _method_gaps(cls: type) -> list[str]:
    gaps = []
    for name, function, bound in _methods(cls):
        missing = _undocumented(_parameters(function, bound), section(function.__doc__))
        gaps += [f"{cls.__name__}.{name} parameter {p!r} is not in its Args:" for p in missing]
    return gaps


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
def test_every_constructor_parameter_is_documented(cls: type) -> None:
    assert not _constructor_gaps(cls), "\n".join(_constructor_gaps(cls))


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
def test_every_public_method_parameter_is_in_args(cls: type) -> None:
    gaps = _method_gaps(cls)
    assert not gaps, f"{len(gaps)} undocumented:\n" + "\n".join(gaps)


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
def test_every_public_property_has_a_docstring(cls: type) -> None:
    missing = [name for name, prop in _properties(cls) if not (prop.__doc__ or "").strip()]
    assert not missing, f"{cls.__name__}: properties without a docstring: {missing}"


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
def test_every_class_and_public_method_has_a_docstring(cls: type) -> None:
    missing = [name for name, function, _ in _methods(cls) if not (function.__doc__ or "").strip()]
    if not (cls.__doc__ or "").strip():
        missing.insert(0, cls.__name__)
    assert not missing, f"{cls.__name__}: without a docstring: {missing}"


def test_dataclasses_use_field_docstrings_not_args() -> None:
    """One convention per kind of class, so a field is never described twice, differently."""
    doubled = [c.__name__ for c in CLASSES if dataclasses.is_dataclass(c) and section(c.__doc__)]
    assert not doubled, f"document these dataclasses' fields with field docstrings, not Args: {doubled}"


def test_init_args_live_in_the_class_docstring() -> None:
    """`help(Accelerator)` and the reference show the class docstring first: its Args: is the one place."""
    assert not section(Accelerator.__init__.__doc__)
    assert (Accelerator.__init__.__doc__ or "").strip(), "help(Accelerator) would show 'Initialize self'"


@pytest.mark.parametrize("name", EXAMPLED)
def test_most_used_methods_show_an_example(name: str) -> None:
    lines = inspect.cleandoc(getattr(Accelerator, name).__doc__ or "").splitlines()
    assert "Example:" in lines or "Examples:" in lines, f"Accelerator.{name} has no Example: section"


def test_the_checker_sees_what_it_checks() -> None:
    """The parser reads Google style (stars, types, continuation lines) and the walk finds the mixins' methods."""

    def sample(a: int, *args: int, b: str = "", **kwargs: Any) -> None:
        """Do.

        Args:
            a (int): first,
                continued: not an entry.
            *args: more.
            kwargs: the rest.

        Returns:
            nothing: not an argument.
        """

    assert section(sample.__doc__) == ["a", "*args", "kwargs"]
    assert _undocumented(_parameters(sample, bound=False), section(sample.__doc__)) == ["b"]
    names = {name for name, _, _ in _methods(Accelerator)}
    assert {"prepare", "gather", "save_state", "log", "no_sync"} <= names
    assert {"device", "process_index", "is_main_process"} <= {name for name, _ in _properties(Accelerator)}


def test_the_reference_renders_every_public_name() -> None:
    """docs/reference/ (built by `mkdocs build --strict` in CI) has a `::: accel.<name>` block for each of `accel.__all__`."""
    reference = Path(__file__).resolve().parents[2] / "docs" / "reference"
    rendered = set(re.findall(r"^::: accel\.(\w+)$", "\n".join(p.read_text() for p in reference.glob("*.md")), re.MULTILINE))
    missing = sorted(set(accel.__all__) - rendered - {"__version__"})
    assert not missing, f"add `::: accel.<name>` for these to a page of docs/reference/: {missing}"
