"""docs/migration.md's tables against the real names, so that they cannot drift.

Each table follows a `<!-- migration-table: X -->` marker; its first column lists names in
backticks, its second a status. The names come from the installed Accelerate (a test-only
dependency): every public name of `accelerate.Accelerator` (class attributes and the attributes
its constructor sets), every argument of its constructor, every public name of the `accelerate`
package, and every public name of `accelerate.utils` (a row, or named in the out-of-scope list,
by itself or by its module). A name marked supported must exist in accel at the same place; a
name marked not supported must import as a stand-in that says why when used, or not exist.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

accelerate = pytest.importorskip(
    "accelerate", reason="accelerate is not installed; it is in accel's test extra (pip install -e '.[test]')"
)
importlib.import_module("accelerate.utils")

import accel
import accel.utils
from accel._accelerate_names import is_refused

DOC = Path(__file__).resolve().parents[2] / "docs" / "migration.md"
SUPPORTED, DIFFERS, NOT_SUPPORTED = "supported", "supported, differs", "not supported"
STATUSES = (SUPPORTED, DIFFERS, NOT_SUPPORTED)
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_MISSING = object()


@dataclass(frozen=True)
class Row:
    """One row of a migration table."""

    names: tuple[str, ...]
    status: str
    notes: str
    line: int


def read_table(marker: str) -> list[Row]:
    """The rows of the table right after `<!-- migration-table: marker -->`."""
    lines = DOC.read_text().splitlines()
    start = lines.index(f"<!-- migration-table: {marker} -->")
    table = []
    for number, line in enumerate(lines[start + 1:], start + 2):
        if not line.startswith("|"):
            break
        table.append((number, line))
    assert len(table) > 2, f"docs/migration.md:{start + 1}: no table after the {marker} marker"
    return [_row(number, line) for number, line in table[2:]]  # after the header and the |---| line


def _row(number: int, line: str) -> Row:
    cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
    assert len(cells) == 3, f"docs/migration.md:{number}: a row has 3 cells (name | status | notes): {line}"
    spans = re.findall(r"`([^`]+)`", cells[0])
    assert spans and all(NAME.fullmatch(span) for span in spans), f"docs/migration.md:{number}: names: {cells[0]}"
    return Row(tuple(spans), cells[1].strip("*").strip(), cells[2], number)


def out_of_scope(marker: str) -> tuple[set[str], set[str]]:
    """(names, modules) in backticks in the paragraph list after `<!-- migration-out-of-scope: marker -->`."""
    text = DOC.read_text()
    start = text.index(f"<!-- migration-out-of-scope: {marker} -->")
    end = text.find("\n#", start)
    spans = re.findall(r"`([^`]+)`", text[start:] if end < 0 else text[start:end])
    modules = {span for span in spans if span.startswith("accelerate.")}
    return set(spans) - modules, modules


def names_of(rows: list[Row], *statuses: str) -> set[str]:
    return {name for row in rows if not statuses or row.status in statuses for name in row.names}


def resolve(dotted: str) -> Any:
    """The object at a dotted path (`package.module.name`), or _MISSING."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            value: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:]:
            value = getattr(value, part, _MISSING)
            if value is _MISSING:
                return _MISSING
        return value
    return _MISSING


def public(namespace: Any) -> set[str]:
    """The public names of a class or module, without submodules."""
    return {n for n in dir(namespace) if not n.startswith("_")
            and not isinstance(getattr(namespace, n, None), types.ModuleType)}


def accelerate_instance_attributes() -> set[str]:
    """The public attributes Accelerate's constructor sets (in a fresh process: its state is a singleton)."""
    code = "import json, accelerate; print(json.dumps(sorted(vars(accelerate.Accelerator(cpu=True)))))"
    launch = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "ACCEL_")) and k not in launch}
    command = [sys.executable, "-c", code]
    done = subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return {name for name in json.loads(done.stdout.splitlines()[-1]) if not name.startswith("_")}


def check_against(rows: list[Row], exists: Any, where: str, refused: Any = lambda name: False) -> None:
    """Supported rows name what exists in accel; not-supported rows name what does not, or what `refused`
    says is a refusing stand-in (importable, raising NotImplementedError with the reason when used)."""
    absent = sorted(name for name in names_of(rows, SUPPORTED, DIFFERS) if not exists(name))
    assert not absent, f"docs/migration.md marks these supported, but {where} has no such name: {absent}"
    stale = sorted(name for name in names_of(rows, NOT_SUPPORTED) if exists(name) and not refused(name))
    assert not stale, f"docs/migration.md marks these not supported, but {where} has them; update their rows: {stale}"


@pytest.mark.parametrize(
    "marker",
    ["accelerate.Accelerator.__init__", "accelerate.Accelerator", "accelerate", "accelerate.utils", "accelerate.data_loader"],
)
def test_every_row_has_a_known_status_a_reason_and_unique_names(marker: str) -> None:
    rows = read_table(marker)
    for row in rows:
        assert row.status in STATUSES, f"docs/migration.md:{row.line}: status {row.status!r}; accepted: {STATUSES}"
        if row.status in (DIFFERS, NOT_SUPPORTED):
            assert row.notes, f"docs/migration.md:{row.line}: {row.status} needs the difference or the reason"
    listed = [name for row in rows for name in row.names]
    assert len(listed) == len(set(listed)), sorted({n for n in listed if listed.count(n) > 1})


def test_every_constructor_argument_of_accelerate_has_a_row() -> None:
    rows = read_table("accelerate.Accelerator.__init__")
    theirs = set(inspect.signature(accelerate.Accelerator.__init__).parameters) - {"self"}
    ours = set(inspect.signature(accel.Accelerator.__init__).parameters) - {"self"}
    assert not theirs - names_of(rows), f"add rows for Accelerate's arguments {sorted(theirs - names_of(rows))}"
    assert not names_of(rows) - theirs, f"not arguments of Accelerate's: {sorted(names_of(rows) - theirs)}"
    check_against(rows, lambda name: name in ours, "accel.Accelerator.__init__")


def test_every_public_name_of_accelerates_accelerator_has_a_row() -> None:
    rows = read_table("accelerate.Accelerator")
    theirs = public(accelerate.Accelerator) | accelerate_instance_attributes()
    assert not theirs - names_of(rows), f"add rows for Accelerator.{sorted(theirs - names_of(rows))}"
    assert not names_of(rows) - theirs, f"not names of Accelerate's Accelerator: {sorted(names_of(rows) - theirs)}"
    instance = accel.Accelerator(cpu=True)
    check_against(rows, lambda name: hasattr(accel.Accelerator, name) or hasattr(instance, name), "accel.Accelerator")


def test_every_public_name_of_the_accelerate_package_has_a_row() -> None:
    rows = read_table("accelerate")
    unknown = sorted(name for name in names_of(rows) if resolve(name) is _MISSING)
    assert not unknown, f"no such names in Accelerate: {unknown}"
    top_level = {name.removeprefix("accelerate.") for name in names_of(rows) if name.count(".") == 1}
    assert not public(accelerate) - top_level, f"add rows for accelerate.{sorted(public(accelerate) - top_level)}"
    def ours(name: str) -> Any:
        return resolve("accel" + name.removeprefix("accelerate"))

    check_against(rows, lambda name: ours(name) is not _MISSING, "accel", lambda name: is_refused(ours(name)))


def test_every_public_name_of_accelerate_utils_has_a_row_or_is_out_of_scope() -> None:
    rows = read_table("accelerate.utils")
    excluded, modules = out_of_scope("accelerate.utils")
    theirs = public(accelerate.utils)
    unknown = sorted((names_of(rows) | excluded) - theirs)
    assert not unknown, f"no such names in accelerate.utils: {unknown}"
    assert not names_of(rows) & excluded, f"both a row and out of scope: {sorted(names_of(rows) & excluded)}"
    not_modules = sorted(m for m in modules if not isinstance(resolve(m), types.ModuleType))
    assert not not_modules, f"out of scope, but not modules of Accelerate: {not_modules}"
    uncovered = sorted(n for n in theirs - names_of(rows) - excluded if _home(n) not in modules)
    assert not uncovered, f"add rows for, or name as out of scope, accelerate.utils.{uncovered}"
    check_against(rows, lambda name: hasattr(accel.utils, name), "accel.utils",
                  lambda name: is_refused(getattr(accel.utils, name)))


@pytest.mark.parametrize(("marker", "ours"), [("accelerate", accel), ("accelerate.utils", accel.utils)])
def test_every_name_marked_not_supported_imports_and_says_why_when_used(marker: str, ours: Any) -> None:
    """docs/migration.md promises that every import still works: a name accel does not implement
    imports (a script may import it for a path it does not take) and raises with the reason when used."""
    for name in names_of(read_table(marker), NOT_SUPPORTED):
        short = name.removeprefix(marker + ".")
        if "." in short:  # a name of a submodule (accelerate.tracking.X): its own table's test covers it
            continue
        value = getattr(ours, short, _MISSING)
        assert value is not _MISSING, f"{ours.__name__}.{short} is marked not supported but does not import"
        if isinstance(value, type) and not is_refused(value):
            continue  # an enum or class accel has, marked not supported for its use (e.g. a field)
        with pytest.raises(NotImplementedError, match=rf"{ours.__name__}\.{short} is not supported by accel: \w"):
            value()


def test_every_name_defined_in_accelerate_data_loader_has_a_row() -> None:
    import accel.data_loader

    loader_module = importlib.import_module("accelerate.data_loader")
    rows = read_table("accelerate.data_loader")
    theirs = {name for name in public(loader_module) if getattr(getattr(loader_module, name), "__module__", None) == loader_module.__name__}
    assert not theirs - names_of(rows), f"add rows for accelerate.data_loader.{sorted(theirs - names_of(rows))}"
    assert not names_of(rows) - theirs, f"not names of accelerate.data_loader: {sorted(names_of(rows) - theirs)}"
    check_against(rows, lambda name: hasattr(accel.data_loader, name), "accel.data_loader",
                  lambda name: is_refused(getattr(accel.data_loader, name)))
    for name in names_of(rows, NOT_SUPPORTED):  # each one imports, and says why when used
        with pytest.raises(NotImplementedError, match=rf"accel\.data_loader\.{name} is not supported by accel: \w"):
            getattr(accel.data_loader, name)()


def _home(name: str) -> str | None:
    """The module of accelerate.utils that defines `name` (for a constant: the submodule holding it)."""
    value = getattr(accelerate.utils, name)
    if inspect.isclass(value) or callable(value):
        return getattr(value, "__module__", None)
    submodules = sorted(n for n in dir(accelerate.utils) if isinstance(getattr(accelerate.utils, n), types.ModuleType))
    for submodule in submodules:
        if getattr(getattr(accelerate.utils, submodule), name, _MISSING) is value:
            return f"accelerate.utils.{submodule}"
    return None
