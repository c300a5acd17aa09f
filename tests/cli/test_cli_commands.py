"""`accel --help`, `accel config default`, `accel env` and `accel test`, run as real commands."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import yaml

from accel.settings import ALL_SETTINGS


def test_help_is_fast_and_lists_the_commands(clean_env: dict[str, str]) -> None:
    accel = shutil.which("accel")
    assert accel is not None, "the console script is installed by `pip install -e .`"
    start = time.perf_counter()
    result = subprocess.run([accel, "--help"], env=clean_env, capture_output=True, text=True, check=True)
    assert time.perf_counter() - start < 1.0
    for command in ("config", "launch", "env", "test"):
        assert command in result.stdout


def test_launch_help_has_a_flag_per_setting(run_accel) -> None:
    text = run_accel("launch", "--help").stdout
    for setting in ALL_SETTINGS:
        for flag in setting.flags:
            assert flag in text
        assert setting.env_var in text


def test_config_default_writes_then_refuses_to_overwrite(run_accel, tmp_path: Path, one_error_line) -> None:
    path = tmp_path / "xdg" / "accel" / "config.yaml"
    first = run_accel("config", "default")
    assert first.returncode == 0, first.stderr
    assert first.stderr.strip() == f"accel config default: wrote {path}"
    # what a script also sets in its code (gradient_accumulation_steps, ...) is not written at its default:
    # absent, it keeps that default, and the script's own value then runs without a warning
    assert yaml.safe_load(path.read_text()) == {
        "mixed_precision": "no", "num_processes": 1, "num_machines": 1, "machine_rank": 0, "use_cpu": True,
    }
    path.write_text("mixed_precision: bf16\n")
    again = run_accel("config", "default")
    assert again.returncode == 2
    assert one_error_line(again) == f"accel config default: {path} exists; pass --force to overwrite it"
    assert path.read_text() == "mixed_precision: bf16\n"
    forced = run_accel("config", "default", "--force", "--mixed_precision", "fp8", "--fp8_amax_history_len", "16")
    assert forced.returncode == 0, forced.stderr
    written = yaml.safe_load(path.read_text())
    assert written["mixed_precision"] == "fp8" and written["fp8_config"] == {"amax_history_len": 16}


def test_config_default_refuses_recipe_flags_without_fp8(run_accel, one_error_line) -> None:
    result = run_accel("config", "default", "--fp8_margin", "1")
    assert result.returncode == 2
    assert "conflicting flags: --fp8_margin" in one_error_line(result)


def test_env_reports_versions_devices_precisions_and_config(run_accel, tmp_path: Path) -> None:
    config = tmp_path / "xdg" / "accel" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("mixed_precision: bf16\n")
    result = run_accel("env")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    for piece in ("accel: ", "torch: ", "Python: ", "OS: ", "CPU: ", "GPUs: ", "Precisions on cpu:",
                  "  bf16       runs", "FP8 backends:", "  te         cannot run: TransformerEngine",
                  f"Config file: {config} (the default location):", "  mixed_precision: bf16"):
        assert piece in text
    msamp = text.splitlines().index(next(line for line in text.splitlines() if line.startswith("  msamp ")))
    assert text.splitlines()[msamp + 1] == (
        "             note: MS-AMP is unmaintained upstream (no commits since December 2025; Accelerate marks it "
        "deprecated). Instead: backend='native' runs MS-AMP's recipe (optimization_level O1 or O2) on any device "
        "without building MS-AMP; 'te' or 'ao' run FP8 with NVIDIA's or PyTorch's maintained kernels.")


def test_selftest_passes_with_the_active_config(run_accel, tmp_path: Path) -> None:
    config = tmp_path / "xdg" / "accel" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("mixed_precision: bf16\n")
    result = run_accel("test")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["ok    it trains", "ok    loss decreases", "ok    precision",
                                                       "accel test"]
    assert "asked 'bf16', runs 'bf16'" in lines[2]
    assert lines[-1] == "accel test: PASS"


def test_selftest_with_two_processes_says_pass_once_from_the_main_process(run_accel) -> None:
    """Each process's checks are its own lines ([rank N]); the verdict, for both, is one line, printed last."""
    result = run_accel("test", "--num_processes", "2", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert result.stdout.count("accel test: PASS") == 1, result.stdout
    assert lines[-1] == "accel test: PASS"
    for rank in (0, 1):
        assert sum(line.startswith(f"[rank {rank}] ok  ") for line in lines) == 3, result.stdout


def test_selftest_refuses_a_precision_that_cannot_run_before_starting(run_accel, one_error_line) -> None:
    """TransformerEngine needs a CUDA GPU: on this CPU-only test machine the check is refused in one line."""
    result = run_accel("test", "--mixed_precision", "fp8", "--fp8_backend", "te")
    assert result.returncode == 2
    assert result.stdout == ""
    assert one_error_line(result).startswith("accel test: mixed_precision 'fp8' cannot run on cpu")
