"""`accel config` driven in a real pseudo-terminal, and the round trip wizard -> config.yaml -> launch -> script."""

from __future__ import annotations


import io
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pexpect
import pytest
import torch
import yaml

from accel.backends.names import CANONICAL_PRECISIONS
from accel.cli import capabilities
from accel.settings import FP8_SETTINGS_BY_KEY

DOWN, ENTER, BACKSPACE, CTRL_C, CTRL_D = "\x1b[B", "\r", "\x7f", "\x03", "\x04"
ROUNDTRIP = Path(__file__).parent / "scripts" / "roundtrip.py"


class Wizard:
    """A running `accel config` in a pseudo-terminal: wait for a question, then type."""

    def __init__(self, config: Path, env: dict[str, str]) -> None:
        env = {**env, "PROMPT_TOOLKIT_NO_CPR": "1", "TERM": "xterm"}
        self.child = pexpect.spawn(sys.executable, ["-m", "accel", "config", "--config_file", str(config)],
                                   env=env, encoding="utf-8", timeout=20, dimensions=(50, 250))
        self.transcript = io.StringIO()
        """Everything the wizard printed, for checks on the whole session."""
        self.child.logfile_read = self.transcript

    def answer(self, question: str, keys: str) -> None:
        self.child.expect(question)
        time.sleep(0.05)  # let prompt_toolkit start reading before the keys arrive
        self.child.send(keys)

    def text(self, question: str, text: str) -> None:
        """Replace the default shown in a text prompt by `text`."""
        self.answer(question, BACKSPACE * 8 + text + ENTER)

    def pick(self, question: str, choices: list[str], choice: str, default: str | None = None) -> None:
        """Choose `choice` in a menu whose cursor starts on `default` (the first choice when None).

        `choices` are the menu's choices that can be chosen: the cursor skips those shown as unavailable.
        """
        start = choices.index(default) if default is not None else 0
        self.answer(question, DOWN * (choices.index(choice) - start) + ENTER)

    def finish(self) -> tuple[int, str]:
        self.child.expect(pexpect.EOF)
        self.child.close()
        return self.child.exitstatus, self.child.before


def choices_of(key: str) -> list[str]:
    return list(FP8_SETTINGS_BY_KEY[key].kind.choices)


def launch_roundtrip(config: Path, env: dict[str, str]) -> dict[str, Any]:
    """`accel launch --config_file CONFIG roundtrip.py`; what the script rebuilt from its environment."""
    result = subprocess.run([sys.executable, "-m", "accel", "launch", "--config_file", str(config), str(ROUNDTRIP)],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("ROUNDTRIP "))
    return json.loads(line.removeprefix("ROUNDTRIP "))


def test_fp8_answers_reach_the_script(clean_env: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "fp8.yaml"
    wizard = Wizard(config, clean_env)
    wizard.answer("How many machines", ENTER)
    wizard.text("How many training processes", "0")
    wizard.answer("must be an int >= 1", BACKSPACE + "1" + ENTER)  # the invalid answer is asked again
    wizard.pick("Which precision", list(CANONICAL_PRECISIONS), "fp8")
    wizard.child.expect("Which FP8 backend")
    wizard.answer("te \\(TransformerEngine is not installed", ENTER)  # shown, with why it cannot be chosen
    wizard.answer("Change any of them", "y")
    # scaling comes first; what the native backend cannot run is shown with why, and skipped by the cursor
    wizard.pick("mxfp8 \\(cannot run on the 'native' FP8 backend", ["default", "delayed", "current"], "delayed")
    wizard.pick("base_precision", choices_of("base_precision"), "fp16")
    wizard.pick("fp8_format", choices_of("fp8_format"), "E4M3")
    wizard.text("margin", "1")
    wizard.text("amax_history_len", "16")
    wizard.pick("amax_compute_algo", choices_of("amax_compute_algo"), "most_recent")
    wizard.pick("optimization_level", ["default", *choices_of("optimization_level")], "O2", "default")
    wizard.answer("use_autocast_during_eval", "y")
    wizard.answer("exclude_modules", "lm_head, blocks.*" + ENTER)
    wizard.text("small_layer_dim", "2048")
    wizard.answer("fp8_params", "y")
    wizard.text("health_interval", "100")
    wizard.text("Gradient accumulation", "4")
    wizard.answer("Compile the model", ENTER)
    status, output = wizard.finish()
    assert status == 0, output
    answered_recipe = {"backend": "native", "scaling": "delayed", "base_precision": "fp16", "fp8_format": "E4M3",
                       "margin": 1, "amax_history_len": 16, "amax_compute_algo": "most_recent",
                       "optimization_level": "O2", "use_autocast_during_eval": True,
                       "exclude_modules": ["lm_head", "blocks.*"], "small_layer_dim": 2048, "fp8_params": True,
                       "health_interval": 100}
    written = yaml.safe_load(config.read_text())
    assert written == {"mixed_precision": "fp8", "num_processes": 1, "num_machines": 1, "use_cpu": True,
                       "gradient_accumulation_steps": 4, "fp8_config": answered_recipe}

    seen = launch_roundtrip(config, clean_env)
    settings = seen["settings"]
    assert {k: settings[k] for k in ("mixed_precision", "num_processes", "num_machines", "use_cpu",
                                     "gradient_accumulation_steps")} == {k: v for k, v in written.items() if k != "fp8_config"}
    assert {k: seen["recipe"][k] for k in answered_recipe} == answered_recipe
    assert seen["recipe_explicit"] == sorted(answered_recipe)
    assert seen["accelerator"]["mixed_precision"] == "fp8"


def test_the_wizard_offers_only_what_the_backend_runs(clean_env: dict[str, str], tmp_path: Path) -> None:
    """ao honours neither margin nor delayed scaling: they are not offered, and the config it writes runs."""
    config = tmp_path / "ao.yaml"
    wizard = Wizard(config, clean_env)
    wizard.answer("How many machines", ENTER)
    wizard.answer("How many training processes", ENTER)
    wizard.pick("Which precision", list(CANONICAL_PRECISIONS), "fp8")
    wizard.pick("Which FP8 backend", ["native", "ao"], "ao")
    wizard.child.expect("not used by the 'ao' backend, left at their defaults: margin, amax_history_len, "
                        "amax_compute_algo, backward_override, optimization_level, fp8_params")
    wizard.answer("Change any of them", "y")
    wizard.child.expect("delayed \\(cannot run on the 'ao' FP8 backend: torchao removed delayed scaling")
    wizard.pick("block \\(", ["default", "current", "rowwise", "rowwise_with_gw_hp", "mxfp8"], "rowwise")
    wizard.pick("base_precision", choices_of("base_precision"), "fp32")
    wizard.answer("HYBRID \\(cannot run on the 'ao' FP8 backend: it always runs fp8_format='E4M3'", ENTER)  # E4M3
    wizard.answer("use_autocast_during_eval", ENTER)
    wizard.answer("exclude_modules", ENTER)
    wizard.answer("small_layer_dim", ENTER)  # nothing typed: the default (None) stays, and is not written
    wizard.answer("health_interval", ENTER)
    wizard.answer("Gradient accumulation", ENTER)
    wizard.answer("Compile the model", ENTER)
    status, output = wizard.finish()
    assert status == 0, output
    for question in ("margin:", "amax_history_len:", "optimization_level:", "fp8_params:"):
        assert f"? {question}" not in wizard.transcript.getvalue()
    written = yaml.safe_load(config.read_text())
    assert written["fp8_config"] == {"backend": "ao", "scaling": "rowwise", "base_precision": "fp32",
                                     "fp8_format": "E4M3"}
    launched = subprocess.run([sys.executable, "-m", "accel", "launch", "--config_file", str(config), str(ROUNDTRIP)],
                              env=clean_env, capture_output=True, text=True, timeout=120)
    assert launched.returncode == 0, launched.stderr


def test_msamp_is_offered_marked_unmaintained(clean_env: dict[str, str], tmp_path: Path) -> None:
    """MS-AMP cannot run on this CPU, but the menu still lists it, marked, before anyone builds it from source."""
    wizard = Wizard(tmp_path / "msamp.yaml", clean_env)
    wizard.answer("How many machines", ENTER)
    wizard.answer("How many training processes", ENTER)
    wizard.pick("Which precision", list(CANONICAL_PRECISIONS), "fp8")
    wizard.child.expect("Which FP8 backend")
    wizard.child.expect("msamp \\(unmaintained upstream\\) \\(MS-AMP is not installed")
    wizard.child.sendcontrol("c")
    wizard.child.expect(pexpect.EOF)
    wizard.child.close()
    assert not (tmp_path / "msamp.yaml").exists()


def test_no_raw_warning_before_the_first_question(clean_env: dict[str, str], tmp_path: Path) -> None:
    """Slow precisions are marked in the menu and said once after the choice, never as Python warnings."""
    wizard = Wizard(tmp_path / "c.yaml", clean_env)
    wizard.answer("How many machines", ENTER)
    wizard.answer("How many training processes", ENTER)
    wizard.pick("Which precision", list(CANONICAL_PRECISIONS), "bf16")
    wizard.answer("Quantize the Linear weights", ENTER)
    wizard.answer("Gradient accumulation", ENTER)
    wizard.answer("Compile the model", ENTER)
    status, output = wizard.finish()
    assert status == 0, output
    transcript = wizard.transcript.getvalue()
    assert "Warning" not in transcript and "warnings.warn" not in transcript
    bf16_slow = capabilities.speed_note("bf16", torch.device("cpu")) is not None  # measured, as the wizard does
    assert transcript.count("note: bf16 will be slow") == (1 if bf16_slow else 0)


def test_bf16_answers_reach_the_accelerator(clean_env: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "bf16.yaml"
    wizard = Wizard(config, clean_env)
    wizard.answer("How many machines", ENTER)
    wizard.answer("How many training processes", ENTER)
    wizard.pick("Which precision", list(CANONICAL_PRECISIONS), "bf16")
    wizard.answer("Quantize the Linear weights", ENTER)
    wizard.text("Gradient accumulation", "2")
    wizard.answer("Compile the model", ENTER)
    status, output = wizard.finish()
    assert status == 0, output
    seen = launch_roundtrip(config, clean_env)
    assert seen["accelerator"] == {"mixed_precision": "bf16", "gradient_accumulation_steps": 2, "device": "cpu"}
    assert seen["settings"]["mixed_precision"] == "bf16" and "recipe" not in seen


def test_compile_answers_reach_the_accelerator(clean_env: dict[str, str], tmp_path: Path) -> None:
    """Backends and modes that cannot run here are shown with why, and skipped by the cursor."""
    config = tmp_path / "compiled.yaml"
    wizard = Wizard(config, clean_env)
    for question in ("How many machines", "How many training processes", "Which precision",
                     "Quantize the Linear weights", "Gradient accumulation"):
        wizard.answer(question, ENTER)
    wizard.answer("Compile the model", "y")
    wizard.child.expect("Which torch.compile backend")
    wizard.answer("cudagraphs \\(dynamo backend 'cudagraphs' runs CUDA graphs, which need a CUDA device", ENTER)
    wizard.answer("Change the defaults sent to torch.compile", "y")
    wizard.child.expect("Which torch.compile mode")
    wizard.pick("reduce-overhead \\(dynamo mode 'reduce-overhead' runs CUDA graphs", ["default", "max-autotune",
                                                                                     "max-autotune-no-cudagraphs"],
                "max-autotune-no-cudagraphs")
    wizard.answer("fullgraph", "y")
    wizard.answer("dynamic", "n")
    status, output = wizard.finish()
    assert status == 0, output
    assert yaml.safe_load(config.read_text())["dynamo_config"] == {
        "dynamo_backend": "inductor", "dynamo_mode": "max-autotune-no-cudagraphs", "dynamo_use_fullgraph": True,
        "dynamo_use_dynamic": False,
    }
    seen = launch_roundtrip(config, clean_env)
    assert seen["dynamo"] == {"backend": "inductor", "mode": "max-autotune-no-cudagraphs", "fullgraph": True,
                              "dynamic": False}


def test_existing_values_are_the_defaults(clean_env: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("mixed_precision: 16-true\nnum_processes: 2\ngradient_accumulation_steps: 3\n")
    wizard = Wizard(config, clean_env)
    # 16-true: DeepSpeed is not asked (it runs fp32, fp16 and bf16 mixed only)
    for question in ("How many machines", "How many training processes", "Which precision", "Shard the model",
                     "out as a device mesh", "Quantize the Linear weights", "Gradient accumulation", "Compile the model"):
        wizard.answer(question, ENTER)
    status, output = wizard.finish()
    assert status == 0, output
    said = " ".join(wizard.transcript.getvalue().split())  # the terminal may wrap the line
    assert f"{config} exists: its values are the defaults below, and it is replaced when you finish" in said
    assert yaml.safe_load(config.read_text()) == {
        "mixed_precision": "16-true", "num_processes": 2, "num_machines": 1, "use_cpu": True,
        "gradient_accumulation_steps": 3,
    }


@pytest.mark.parametrize("key", [CTRL_C, CTRL_D], ids=["ctrl-c", "ctrl-d"])
def test_cancel_leaves_the_existing_file_untouched(clean_env: dict[str, str], tmp_path: Path, key: str) -> None:
    config = tmp_path / "keep.yaml"
    original = "# mine\nmixed_precision: bf16\n"
    config.write_text(original)
    wizard = Wizard(config, clean_env)
    wizard.answer("How many machines", "2" + ENTER)
    wizard.answer("Which machine is this one", BACKSPACE * 4 + key)  # Ctrl-D ends input only on an empty line
    status, output = wizard.finish()
    assert status == 130
    assert f"accel config: cancelled; {config} left unchanged" in output
    assert "Traceback" not in output
    assert config.read_text() == original
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary file left


def test_wizard_needs_a_terminal(run_accel, one_error_line) -> None:
    result = run_accel("config")
    assert result.returncode == 2
    assert "needs an interactive terminal" in one_error_line(result)
