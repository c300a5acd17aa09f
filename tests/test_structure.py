"""The package's architecture, checked from its code: what `import accel.state` loads, which folders
may import which, that no module outside the Accelerator reads its private attributes, and that the
parallelism strategy is chosen in one place (accel/parallel/choice.py) behind an interface free of
any engine's shard I/O."""

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


@pytest.mark.parametrize(
    "folder", ["checkpointing", "data", "distributed", "training", "parallel", "fsdp", "deepspeed", "backends"]
)
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


CHOOSER = "parallel/choice.py"
"""The one module that picks a strategy (accel.parallel.choice.create_strategy)."""


def _outside_type_checking(tree: ast.Module) -> list[ast.AST]:
    """Every node of `tree` except those under `if TYPE_CHECKING:` (imports there are for annotations only)."""
    nodes: list[ast.AST] = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        nodes.append(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and ast.unparse(child.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
                pending.extend(child.orelse)
            else:
                pending.append(child)
    return nodes


def _strategy_choices(source: str) -> list[str]:
    """Where `source` picks a strategy: builds one (a call to a class named *Strategy), or imports a concrete
    strategy class or a strategy module at run time. Importing the interface, ParallelStrategy, is asking."""
    found = []
    for node in _outside_type_checking(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if name.endswith("Strategy"):
                found.append(f"{node.lineno}: {name}(...)")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("accel"):
            for alias in node.names:
                chosen = alias.name.endswith("Strategy") and alias.name != "ParallelStrategy"
                if chosen or alias.name in ("strategy", "tensor_strategy"):
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
        elif isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {alias.name}" for alias in node.names
                      if alias.name.startswith("accel") and alias.name.rsplit(".", 1)[-1] in ("strategy", "tensor_strategy")]
    return found


def test_the_parallelism_is_chosen_in_one_place() -> None:
    """Only accel.parallel.choice builds a strategy or imports one at run time (each engine's, lazily); everything
    else asks the strategy it was given (typed as the interface, ParallelStrategy), and never compares the
    Accelerator's fsdp_plugin or deepspeed_plugin to pick a path of its own."""
    choosers = {
        str(path.relative_to(PACKAGE)): choices
        for path in _modules() if (choices := _strategy_choices(path.read_text()))
    }
    assert list(choosers) == [CHOOSER], choosers
    mentions = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path in _modules()
        if not path.is_relative_to(PACKAGE / "fsdp")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Compare) and any(
            isinstance(side, ast.Attribute) and side.attr in ("fsdp_plugin", "deepspeed_plugin")
            for side in [node.left, *node.comparators]
        )
    ]
    assert mentions == []


def test_a_second_place_choosing_a_strategy_is_caught() -> None:
    """The rule above on made-up modules: building or importing a strategy is a choice; typing with the
    interface, or importing an engine's strategy for annotations only, is not."""
    assert _strategy_choices("from accel.fsdp.strategy import FSDPStrategy") == [
        "1: from accel.fsdp.strategy import FSDPStrategy"
    ]
    assert _strategy_choices("def f(s, p):\n    return strategies.DataParallelStrategy(s, p)") == [
        "2: DataParallelStrategy(...)"
    ]
    assert _strategy_choices("def f():\n    from accel.deepspeed import strategy") == [
        "2: from accel.deepspeed import strategy"
    ]
    assert _strategy_choices("import accel.parallel.tensor_strategy") == ["1: import accel.parallel.tensor_strategy"]
    asking = (
        "from typing import TYPE_CHECKING\n"
        "from accel.parallel.strategy import ParallelStrategy\n"
        "if TYPE_CHECKING:\n"
        "    from accel.deepspeed.strategy import DeepSpeedStrategy\n"
        "def f(strategy: ParallelStrategy) -> bool:\n"
        "    return strategy.sharded_checkpoints\n"
    )
    assert _strategy_choices(asking) == []


def test_the_strategy_interface_carries_no_engine_shard_io() -> None:
    """ParallelStrategy declares the shard methods but implements none: torch.distributed.checkpoint's shard I/O
    is the sharded-checkpoint mixins' (accel/parallel/sharded_checkpoints.py), DeepSpeed's its strategy's."""
    tree = ast.parse((PACKAGE / "parallel" / "strategy.py").read_text())
    base = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "ParallelStrategy")
    imported = {name for node in ast.walk(base) if isinstance(node, ast.ImportFrom) for name in [node.module or ""]}
    assert imported == set()
    for method in ("write_shards", "shard_problems", "read_shards", "apply_shards"):
        body = next(node for node in base.body if isinstance(node, ast.FunctionDef) and node.name == method).body
        assert isinstance(body[-1], ast.Raise), method
