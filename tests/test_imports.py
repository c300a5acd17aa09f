"""Import only what runs: a plain run loads no FSDP, DCP, DTensor, elastic, DeepSpeed or native-FP8 code.

Each case runs in a fresh interpreter (what a script pays at start-up), and the families loaded
after ``import torch`` are compared with the ones the feature needs. benchmarks/startup.py measures
the same runs against Accelerate's time and module count.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.fresh_interpreter  # what a script loads from nothing

HEAVY = (
    "torch.distributed.checkpoint", "torch.distributed.tensor", "torch.distributed.elastic",
    "torch.distributed.fsdp", "accel.backends.native_fp8", "accel.backends.fp8", "deepspeed",
    "accel.fsdp.checkpoint", "accel.checkpointing.load", "accel.checkpointing.save",
)
"""What a plain run must not load at start-up (each loads when its feature is asked for)."""

TORCH_AT_FIRST_STEP = ("torch.distributed.tensor", "torch.distributed.fsdp")
"""torch's own first optimizer step loads these (through dynamo), under Accelerate as under accel."""

PROBE = """\
import json, sys
import torch
before = set(sys.modules)
{body}
loaded = set(sys.modules) - before
print("LOADED " + json.dumps(sorted({{f for f in {families!r} for m in loaded if m == f or m.startswith(f + ".")}})))
"""

STEP = """\
from accel import Accelerator
accelerator = Accelerator(cpu=True, mixed_precision="{precision}")
model = torch.nn.Linear(8, 4)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 8), torch.randn(8, 4)), batch_size=4)
model, optimizer, data = accelerator.prepare(model, optimizer, data)
for x, y in data:
    with accelerator.accumulate(model):
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
"""


def loaded_families(body: str) -> set[str]:
    """The HEAVY families a fresh interpreter loads running ``body`` after ``import torch``."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(body=body, families=HEAVY)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("LOADED "))
    return set(json.loads(line.removeprefix("LOADED ")))


def test_building_an_accelerator_loads_none_of_the_heavy_families() -> None:
    assert loaded_families("from accel import Accelerator\nAccelerator(cpu=True)") == set()


@pytest.mark.parametrize("precision", ["no", "bf16"])
def test_a_plain_run_to_its_first_step_loads_only_what_torch_loads_itself(precision: str) -> None:
    assert loaded_families(STEP.format(precision=precision)) <= set(TORCH_AT_FIRST_STEP)


def test_each_feature_loads_its_own_code_when_asked_for() -> None:
    fp8 = "from accel import Accelerator, FP8RecipeKwargs\nAccelerator(cpu=True, mixed_precision='fp8')"
    assert "accel.backends.native_fp8" in loaded_families(fp8)
    fsdp = "from accel import FullyShardedDataParallelPlugin\nFullyShardedDataParallelPlugin()"
    assert "torch.distributed.fsdp" in loaded_families(fsdp)
    checkpoint = "from accel.fsdp import save_sharded"
    assert {"torch.distributed.checkpoint", "accel.fsdp.checkpoint"} <= loaded_families(checkpoint)


def _lazy_packages() -> list[Path]:
    root = Path(__file__).resolve().parents[1] / "accel"
    return sorted(p for p in root.rglob("__init__.py") if "lazy_exports(" in p.read_text())


@pytest.mark.parametrize("init", _lazy_packages(), ids=lambda p: str(p.parent.name))
def test_a_lazy_package_declares_each_name_for_type_checkers_and_every_name_resolves(init: Path) -> None:
    """The TYPE_CHECKING imports (what editors and mypy see) name exactly the lazy exports, from the same modules."""
    tree = ast.parse(init.read_text())
    exports: dict[str, str] = {}
    checked: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "_EXPORTS":
            exports = ast.literal_eval(node.value)
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom) and statement.module is not None
                checked.update({alias.asname or alias.name: statement.module for alias in statement.names})
    assert exports and exports == checked
    package = ".".join(init.parent.relative_to(Path(__file__).resolve().parents[1]).parts)
    module = importlib.import_module(package)
    for name in exports:
        assert getattr(module, name) is getattr(importlib.import_module(exports[name]), name)
    assert set(exports) <= set(dir(module)) and set(exports) <= set(module.__all__)
    # a name that is also a submodule's would become the submodule once that loads (Python sets the attribute)
    submodules = {path.stem for path in init.parent.glob("*.py")}
    assert set(exports) & submodules <= COMMAND_MODULES, set(exports) & submodules


COMMAND_MODULES = {"consolidate"}
"""accel.fsdp.consolidate is the function; the module of that name only runs as `python -m accel.fsdp.consolidate`
(as __main__, so it never replaces the package's attribute)."""
