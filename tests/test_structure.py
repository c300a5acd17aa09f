"""The package's architecture, checked from its code: what `import accel.state` loads, which folders
may import which, and that no module outside the Accelerator reads its private attributes."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "accel"


def _modules(folder: str = "") -> list[Path]:
    return sorted((PACKAGE / folder).rglob("*.py"))


def _imports(path: Path) -> set[str]:
    """Every accel module `path` imports, at the top or inside a function or TYPE_CHECKING block."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in names if name.startswith("accel")}


def test_import_accel_state_loads_under_40_accel_modules() -> None:
    """What an inference script's PartialState needs, without the Accelerator, backends or checkpoints.

    38 today: the settings schema (the Setting class, the catalogue, its DeepSpeed table, Accelerate's
    spellings and the monitoring handlers' names), the kwargs handlers, the collectives (with the stall
    marks `accel launch` reads) and the process state.
    """
    code = "import sys, accel.state; print(sorted(m for m in sys.modules if m.split('.')[0] == 'accel'))"
    loaded = eval(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert len(loaded) < 40, loaded
    assert not any(m.startswith(("accel.accelerator", "accel.checkpointing", "accel.backends.fp8")) for m in loaded)


@pytest.mark.parametrize("folder", ["checkpointing", "data", "distributed", "training", "fsdp", "backends"])
def test_no_folder_below_the_accelerator_imports_it(folder: str) -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(i for i in _imports(path) if i.startswith("accel.accelerator"))
        for path in _modules(folder)
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_no_module_outside_the_accelerator_reads_its_private_attributes() -> None:
    """`accelerator._models` and the like are views kept for Accelerate's users; accel's own code reads
    `accelerator.prepared` (checkpointing through its CheckpointHost protocol)."""
    found = []
    for path in _modules():
        if path.is_relative_to(PACKAGE / "accelerator"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and isinstance(node.value, ast.Name) and node.value.id in ("accelerator", "host")):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.value.id}.{node.attr}")
    assert found == []


def test_the_parallelism_is_chosen_in_one_place() -> None:
    """Only the Accelerator's options pick the FSDP strategy; everything else asks the strategy it was given."""
    choosers = [
        str(path.relative_to(PACKAGE)) for path in _modules()
        if "accel.fsdp.strategy" in _imports(path) and not path.is_relative_to(PACKAGE / "fsdp")
    ]
    assert choosers == ["accelerator/options.py"]
    mentions = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path in _modules()
        if not path.is_relative_to(PACKAGE / "fsdp") and path.name != "options.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Compare) and any(
            isinstance(side, ast.Attribute) and side.attr == "fsdp_plugin" for side in [node.left, *node.comparators]
        )
    ]
    assert mentions == []
