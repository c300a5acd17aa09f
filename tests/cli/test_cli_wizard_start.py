"""`accel config` in a real pseudo-terminal: it speaks before it checks the machine, preselects the FP8 base
precision that runs fast here (by the measured capability), and leaves an accepted default out of config.yaml.

The machine is changed for a test by a `sitecustomize` module first on PYTHONPATH (Python imports it at
start-up, in the wizard and in what `accel launch` starts): it can make importing torch slow, as on a busy
machine, so that anything that loads torch before the first line shows; and it can make the capability layer
(accel.backends.capability._cpu_has_fast_path, oneDNN's probe of the CPU's 16-bit matrix instructions)
answer yes or no, whatever this CPU is.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest
import yaml

from accel.backends.names import CANONICAL_PRECISIONS
from tests.cli.test_cli_wizard import ENTER, Wizard, launch_roundtrip

pytestmark = pytest.mark.fresh_interpreter  # these tests make torch's import slow, which the warm interpreter has done

SHIM = '''"""The test's machine (tests/cli/test_cli_wizard_start.py): imported at start-up, first on PYTHONPATH."""
import importlib.abc
import importlib.util
import sys
import time

TORCH_DELAY = {delay}
FAST_16_BIT = {fast}


class Shim(importlib.abc.MetaPathFinder):
    def __init__(self):
        self.delayed = False

    def find_spec(self, name, path=None, target=None):
        if name == "torch" and TORCH_DELAY and not self.delayed:
            self.delayed = True
            time.sleep(TORCH_DELAY)  # importing torch as slowly as on a busy machine
        if name != "accel.backends.capability" or FAST_16_BIT is None:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module._cpu_has_fast_path = lambda dtype: FAST_16_BIT

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, Shim())
'''
TORCH_DELAY = 4.0
"""Seconds the shim adds to importing torch: far more than the allowance for the first output."""
FIRST_OUTPUT_S = 1.0
"""The wizard's first line, and the line before the machine check, come within this (plus Python's own start)."""
RECIPE_QUESTIONS = ("scaling", "base_precision", "fp8_format", "margin", "amax_history_len", "amax_compute_algo",
                    "optimization_level", "use_autocast_during_eval", "exclude_modules", "small_layer_dim",
                    "fp8_params", "health_interval")
"""The recipe fields the native backend asks after "Change any of them?" (tests/cli/test_cli_wizard.py's order)."""
SLOW_BF16 = "this CPU has no native bfloat16 matrix instructions"


def shimmed(env: dict[str, str], folder: Path, delay: float = 0.0, fast: bool | None = None) -> dict[str, str]:
    """`env` with the shim first on PYTHONPATH: torch's import `delay` s slower; 16-bit matrix products fast or not."""
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(SHIM.format(delay=delay, fast=fast))
    return {**env, "PYTHONPATH": os.pathsep.join([str(folder), env.get("PYTHONPATH", "")])}


def python_start_s(env: dict[str, str]) -> float:
    """How long a bare Python takes to print in a pseudo-terminal now (the machine's load, measured)."""
    start = time.monotonic()
    child = pexpect.spawn(sys.executable, ["-S", "-c", "print('x')"], env=env, encoding="utf-8", timeout=20)
    child.expect("x")
    seconds = time.monotonic() - start
    child.expect(pexpect.EOF)
    child.close()
    return seconds


def test_it_speaks_at_once_and_before_it_checks_the_machine(clean_env: dict[str, str], tmp_path: Path) -> None:
    """The first line within a second of the start, and a line saying what is checked before the check: with
    torch's import made 4 s slow, loading it (counting GPUs, measuring the precisions) before either would show."""
    env = shimmed(clean_env, tmp_path / "shim", delay=TORCH_DELAY)
    allowance = FIRST_OUTPUT_S + python_start_s(env)
    start = time.monotonic()
    wizard = Wizard(tmp_path / "c.yaml", env)
    wizard.child.expect(r"[\s\S]")
    first = time.monotonic() - start
    assert first < allowance, f"the first output came {first:.2f} s after the start (allowed {allowance:.2f} s)"
    wizard.answer("How many machines", ENTER)
    wizard.answer("How many training processes", ENTER)
    answered = time.monotonic()
    wizard.child.expect("Checking which precisions and FP8 backends run on the CPU")
    said = time.monotonic() - answered
    assert said < allowance, f"nothing for {said:.2f} s after the last answer (allowed {allowance:.2f} s)"
    wizard.child.expect("Which precision")
    assert time.monotonic() - answered >= TORCH_DELAY  # the check (torch's slow import) came after the line
    wizard.child.sendcontrol("c")
    status, _ = wizard.finish()
    assert status == 130


@pytest.mark.parametrize(("fast", "change"), [(False, False), (False, True), (True, True)],
                         ids=["bf16-slow-defaults-kept", "bf16-slow-menu", "bf16-fast-menu"])
def test_the_fp8_base_precision_preselected_runs_fast_here(
    clean_env: dict[str, str], tmp_path: Path, fast: bool, change: bool
) -> None:
    """Where the capability check says bf16 is slow, fp32 is preselected and the reason said; where it is fast,
    bf16 (the recipe's default, not written). Enter everywhere keeps what was preselected."""
    env = shimmed(clean_env, tmp_path / "shim", fast=fast)
    config = tmp_path / "fp8.yaml"
    wizard = Wizard(config, env)
    wizard.answer("How many machines", ENTER)
    wizard.answer("How many training processes", ENTER)
    wizard.answer("Which precision", "\x1b[B" * list(CANONICAL_PRECISIONS).index("fp8") + ENTER)
    wizard.answer("Which FP8 backend", ENTER)  # native
    expected = "bf16" if fast else "fp32"
    wizard.child.expect(f"FP8 recipe defaults \\(native backend\\): scaling delayed, base_precision {expected},")
    wizard.answer("Change any of them", "y" if change else "n")
    for question in RECIPE_QUESTIONS if change else ():
        wizard.answer(f"{question}:", ENTER)
    wizard.answer("Gradient accumulation", ENTER)
    wizard.answer("Compile the model", ENTER)
    status, output = wizard.finish()
    assert status == 0, output
    said = " ".join(wizard.transcript.getvalue().split())  # the terminal may wrap a line
    preselected = "base_precision: fp32 preselected, not the recipe's default bf16, which is slow here: " + SLOW_BF16
    assert (preselected in said) == (not fast)
    assert "note: base_precision" not in said  # what was preselected is never slow
    # the base precision menu marks the slow ones, from the same check ("bf16-true  weights and compute in bf16
    # [slow on this CPU]" is the precision menu's line)
    assert ("bf16-true [slow on this CPU]" in said) == (change and not fast)
    written = yaml.safe_load(config.read_text())
    assert written["fp8_config"] == {"backend": "native", **({} if fast else {"base_precision": "fp32"})}
    if not fast and not change:  # the launched script's recipe runs fp32 outside the FP8 matrix products
        recipe = launch_roundtrip(config, env)["recipe"]
        assert recipe["base_precision"] == "fp32"


ACCUMULATING_SCRIPT = '''from accel import Accelerator

accelerator = Accelerator(gradient_accumulation_steps=4)
print("STEPS", accelerator.gradient_accumulation_steps, flush=True)
'''


def test_an_accepted_default_accumulation_is_not_written(clean_env: dict[str, str], tmp_path: Path) -> None:
    """gradient_accumulation_steps kept at 1 (here over a config that said 3) is not written: absent, the
    Accelerator's default is the same 1, and a script that sets its own number runs it without a warning."""
    config = tmp_path / "config.yaml"
    config.write_text("mixed_precision: bf16\ngradient_accumulation_steps: 3\n")
    wizard = Wizard(config, clean_env)
    wizard.answer("How many machines", ENTER)
    wizard.answer("How many training processes", ENTER)
    wizard.answer("Which precision", ENTER)  # bf16, from the file
    wizard.answer("Quantize the Linear weights", ENTER)
    wizard.text("Gradient accumulation", "1")
    wizard.answer("Compile the model", ENTER)
    status, output = wizard.finish()
    assert status == 0, output
    written = yaml.safe_load(config.read_text())
    assert written == {"mixed_precision": "bf16", "num_processes": 1, "num_machines": 1, "use_cpu": True}
    assert launch_roundtrip(config, clean_env)["accelerator"]["gradient_accumulation_steps"] == 1
    script = tmp_path / "accumulating.py"
    script.write_text(ACCUMULATING_SCRIPT)
    launched = subprocess.run([sys.executable, "-m", "accel", "launch", "--config_file", str(config), str(script)],
                              env=clean_env, capture_output=True, text=True, timeout=120)
    assert launched.returncode == 0, launched.stderr
    assert "STEPS 4" in launched.stdout
    assert "overrides" not in launched.stderr and "Warning" not in launched.stderr, launched.stderr
