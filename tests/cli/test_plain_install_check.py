"""A plain install trains, saves and loads: the CI smoke check, numpy declared, an ImportError named as one.

CI runs .ci/plain_install_check.py in a fresh virtual environment holding only what pyproject.toml
declares (.ci/plain_install.sh); here it runs in this environment, in-process, so that the
check itself stays right. Without numpy, save_state and save_model used to fail midway with
"No module named 'numpy'", save_state blaming free space or permissions.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # the standard library's from Python 3.11

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / ".ci" / "plain_install_check.py"


def test_the_smoke_check_passes_here(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("plain_install_check", CHECK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["ok    no: train 5 steps, save_state, load_state, save_model",
                     "ok    fp16: train 5 steps, save_state, load_state, save_model",
                     "plain install check: PASS"]


def test_ci_runs_the_plain_install_then_the_readme_command() -> None:
    run = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "bash .ci/plain_install.sh" in run
    assert run[-1] == 'pip install torch==2.13.0 -e ".[test]" && python -m pytest'  # the README's, last
    assert 'pip install torch==2.13.0 -e ".[test]" && python -m pytest' in (ROOT / "README.md").read_text()
    step = (ROOT / ".ci" / "plain_install.sh").read_text()
    assert "python -m venv" in step and "--system-site-packages" not in step
    assert 'plain_install_check.py" --plain' in step


def _install_requires() -> list[str]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return list(tomllib.load(file)["project"]["dependencies"])


def test_numpy_is_declared_because_safetensors_writes_through_it() -> None:
    names = [requirement.split(">")[0].split("=")[0].split("<")[0].strip() for requirement in _install_requires()]
    assert {"torch", "safetensors", "numpy", "pyyaml", "questionary"} <= set(names)


WITHOUT_NUMPY = """
import sys
sys.modules["numpy"] = None  # as in an environment where numpy is not installed
import torch
from accel import Accelerator
accelerator = Accelerator(cpu=True)
model = accelerator.prepare(torch.nn.Linear(2, 2))
try:
    if sys.argv[1] == "save_state":
        accelerator.save_state(sys.argv[2])
    else:
        accelerator.save_model(model, sys.argv[2])
except Exception as error:
    print(isinstance(error, ImportError), "|", error)
"""


@pytest.mark.fresh_interpreter  # numpy not loaded yet
@pytest.mark.parametrize("call", ["save_state", "save_model"])
def test_without_numpy_the_import_error_is_itself(tmp_path: Path, call: str) -> None:
    target = tmp_path / "out"
    result = subprocess.run([sys.executable, "-c", WITHOUT_NUMPY, call, str(target)],
                            capture_output=True, text=True, timeout=120, check=False)
    is_import_error, message = result.stdout.strip().split(" | ", 1)
    assert is_import_error == "True", result.stdout + result.stderr
    assert "numpy" in message
    assert "free space" not in message and "permissions" not in message
    if call == "save_state":  # checked before anything is gathered or written
        assert "save_state writes safetensors files" in message and "pip install numpy" in message
        assert not target.exists()
