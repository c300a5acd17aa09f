"""Every package's docstring is a map of its folder, checked both ways so that it cannot drift.

The rule, for each package under accel/ (each folder with an `__init__.py`, the root included):

* **Every module is named.** Each `*.py` file of the folder except `__init__.py` / `__main__.py`, and
  each subpackage, appears in the package docstring as a whole word: not inside a longer name, and not
  after a dot (`accel.fsdp.strategy` names a module of accel/fsdp/, not one of the folder whose map
  says it). Writing it as `name.py` (a subpackage as `name/`) counts.
* **Every module the map presents exists.** A map presents a module as a file name, `name.py` (or a
  path, `accel/fsdp/plugin.py`), a subpackage as `name/` (or a path ending in `/`), and another module
  of accel by its import path, `accel.backends.names` (optionally followed by one attribute:
  `accel.fsdp.strategy.FSDPStrategy`). A bare `name.py` or `name/` must be in the package's own folder;
  a path must exist from that folder or from the repository root; an import path must resolve to a
  module or package, and its attribute must occur in that module's code (outside its docstring).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "accel"
PACKAGES = sorted(init.parent for init in PACKAGE.rglob("__init__.py"))

# `name.py` or a path to one (`accel/fsdp/plugin.py`); not part of a dotted name or a longer path.
_FILE = re.compile(r"(?<![\w./*-])((?:[\w-]+/)*\w+\.py)(?![\w*])")
# `name/` or a path to a folder (`accel/fsdp/`): the slash ends the path (nothing named follows it).
_FOLDER = re.compile(r"(?<![\w./*-])((?:[\w-]+/)+)(?![\w.*-])")
# An import path into accel: `accel.backends.names`, `accel.fsdp.strategy.FSDPStrategy`.
_DOTTED = re.compile(r"(?<![\w./])accel(?:\.\w+)+")


def _docstring(package: Path) -> str:
    return ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""


def _label(package: Path) -> str:
    return str(package.relative_to(ROOT)) if package.is_relative_to(ROOT) else package.name


def _members(package: Path) -> list[str]:
    modules = [path.stem for path in package.glob("*.py") if path.stem not in ("__init__", "__main__")]
    subpackages = [path.name for path in package.iterdir() if (path / "__init__.py").is_file()]
    return sorted(modules + subpackages)


def _is_named(name: str, text: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", text) is not None


def _code_without_docstring(path: Path) -> str:
    """The module's source with its docstring blanked out: the code, its comments and strings."""
    source = path.read_text()
    tree = ast.parse(source)
    first = tree.body[0] if tree.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        lines = source.splitlines()
        source = "\n".join(lines[: first.lineno - 1] + lines[first.end_lineno or first.lineno :])
    return source


def _module_path(dotted: str) -> Path | None:
    """The file of an import path into accel (`accel.fsdp.plugin`), or None where there is none."""
    path = ROOT.joinpath(*dotted.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return None


def _broken_import_path(dotted: str) -> str | None:
    """Why `dotted` does not resolve (a module or package, then at most one attribute of it), or None."""
    parts = dotted.split(".")
    module = _module_path(dotted)
    if module is not None:
        return None
    owner = _module_path(".".join(parts[:-1])) if len(parts) > 1 else None
    if owner is None:
        return f"{dotted}: no such module"
    if not _is_named(parts[-1], _code_without_docstring(owner)):
        return f"{dotted}: {parts[-1]!r} is not defined in {owner.relative_to(ROOT)}"
    return None


def _broken_references(package: Path, text: str) -> list[str]:
    broken: list[str] = []
    for match in _FILE.finditer(text):
        reference = match.group(1)
        if "/" in reference:
            if not ((package / reference).is_file() or (ROOT / reference).is_file()):
                broken.append(f"{reference}: no such file")
        elif not (package / reference).is_file():
            broken.append(f"{reference}: no such module in {_label(package)}/")
    for match in _FOLDER.finditer(text):
        reference = match.group(1)
        if reference.count("/") == 1:
            if not (package / reference / "__init__.py").is_file():
                broken.append(f"{reference}: no such subpackage in {_label(package)}/")
        elif not ((package / reference).is_dir() or (ROOT / reference).is_dir()):
            broken.append(f"{reference}: no such folder")
    for match in _DOTTED.finditer(text):
        problem = _broken_import_path(match.group(0))
        if problem is not None:
            broken.append(problem)
    return broken


def test_every_folder_is_a_package_with_a_map() -> None:
    folders = {path.parent for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts}
    assert sorted(_label(folder) for folder in folders if folder not in PACKAGES) == []
    assert [_label(package) for package in PACKAGES if not _docstring(package)] == []


@pytest.mark.parametrize("package", PACKAGES, ids=_label)
def test_the_map_names_every_module(package: Path) -> None:
    text = _docstring(package)
    assert [name for name in _members(package) if not _is_named(name, text)] == []


@pytest.mark.parametrize("package", PACKAGES, ids=_label)
def test_every_module_the_map_presents_exists(package: Path) -> None:
    assert _broken_references(package, _docstring(package)) == []


def test_the_rule_catches_drift_both_ways(tmp_path: Path) -> None:
    """The checks above on a made-up package: a module left out, and modules that do not exist."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    for path in ("__init__.py", "save.py", "load.py", "sub/__init__.py"):
        (package / path).write_text('"""x"""\n')
    text = "save.py and load (the two flows), `sub/`; state.py and `gone/` are not there; accel.nowhere.at_all"
    assert [name for name in _members(package) if not _is_named(name, text)] == []
    assert [name for name in _members(package) if not _is_named(name, "save.py; accel.pkg.load, sub")] == ["load"]
    assert _broken_references(package, text) == [
        "state.py: no such module in pkg/",
        "gone/: no such subpackage in pkg/",
        "accel.nowhere.at_all: no such module",
    ]
    # the drift issue 34 found: checkpointing's map listed a `state` module that does not exist
    assert _broken_import_path("accel.checkpointing.state") == (
        "accel.checkpointing.state: 'state' is not defined in accel/checkpointing/__init__.py"
    )
    assert _broken_import_path("accel.fsdp.strategy.FSDPStrategy") is None
