"""Every bad input is refused with one clear line on stderr and exit status 2, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from accel.cli import capabilities
from accel.cli.main import main

CONFIG_CASES = [
    pytest.param("mixed_precison: bf16\n", ["unknown key mixed_precison", "did you mean mixed_precision?"],
                 id="unknown-key"),
    pytest.param("fp8_config:\n  amax_history_lenght: 16\n",
                 ["unknown key fp8_config.amax_history_lenght", "did you mean fp8_config.amax_history_len?"],
                 id="unknown-recipe-key"),
    pytest.param("num_processes: two\n", ["num_processes='two' must be an int >= 1"],
                 id="wrong-type"),
    pytest.param("num_processes: 0\n", ["num_processes=0 must be an int >= 1"],
                 id="out-of-range"),
    pytest.param("main_process_port: 70000\n", ["main_process_port=70000 must be an int from 1 to 65535"],
                 id="port-out-of-range"),
    pytest.param("use_cpu: sometimes\n", ["use_cpu='sometimes' is not accepted", "accepted: true or false"],
                 id="wrong-bool"),
    pytest.param("mixed_precision: bf17\n", ["mixed_precision='bf17' is not accepted", "'bf16'"],
                 id="unknown-precision"),
    pytest.param("mixed_precision: fp8\nfp8_config:\n  margin: -1\n", ["fp8_config.margin=-1 must be an int >= 0"],
                 id="recipe-out-of-range"),
    pytest.param("fp8_config:\n  backend: tee\n", ["fp8_config.backend='tee'", "Did you mean 'te'?"],
                 id="recipe-unknown-choice"),
    pytest.param("num_processes: 2\n  oops: [\n", [":2:", "YAML syntax error"], id="yaml-syntax"),
    pytest.param("- mixed_precision\n", ["expected a mapping of settings"], id="not-a-mapping"),
]


@pytest.mark.parametrize(("text", "expected"), CONFIG_CASES)
def test_bad_config_file(run_accel, show_env_script: Path, tmp_path: Path, one_error_line, text: str,
                         expected: list[str]) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    result = run_accel("launch", "--config_file", str(config), str(show_env_script))
    assert result.returncode == 2
    line = one_error_line(result)
    assert line.startswith(f"accel launch: {config}")
    for piece in expected:
        assert piece in line
    assert "SHOW" not in result.stdout  # the script never started


FLAG_CASES = [
    pytest.param(["--num_processes", "0"], ["--num_processes=0 must be an int >= 1"], id="zero-processes"),
    pytest.param(["--num_processes", "2", "--num-processes", "3"], ["conflicting flags", "--num-processes 3"],
                 id="same-flag-twice"),
    pytest.param(["--cpu", "--no-cpu"], ["conflicting flags: --cpu True and --no-cpu False"], id="cpu-and-no-cpu"),
    pytest.param(["--fp8_margin", "2"], ["conflicting flags: --fp8_margin", "mixed_precision is 'no'"],
                 id="recipe-without-fp8"),
    pytest.param(["--mixed_precision", "bf16", "--fp8_backend", "native"], ["--fp8_backend", "mixed_precision is 'bf16'"],
                 id="recipe-with-bf16"),
    pytest.param(["--mixed_precision", "fp9"], ["--mixed_precision='fp9' is not accepted", "Did you mean 'fp8'?"],
                 id="unknown-precision"),
    pytest.param(["--num_machines", "2", "--machine_rank", "2"], ["machine_rank 2 is out of range for num_machines 2"],
                 id="rank-out-of-range"),
    pytest.param(["--num_machines", "2", "--num_processes", "3", "--main_process_ip", "10.0.0.1"],
                 ["cannot be split evenly"], id="uneven-split"),
    pytest.param(["--num_machines", "2", "--num_processes", "2"], ["needs main_process_ip"], id="no-main-ip"),
    pytest.param(["--bogus"], ["unrecognized arguments: --bogus"], id="unknown-flag"),
    pytest.param(["--gpu_ids", "0"], ["gpu_ids 0: no GPU 0 here (none visible; use --cpu)"], id="gpu-ids-without-gpu"),
]


@pytest.mark.parametrize(("flags", "expected"), FLAG_CASES)
def test_bad_flags(run_accel, show_env_script: Path, one_error_line, flags: list[str], expected: list[str]) -> None:
    result = run_accel("launch", *flags, str(show_env_script))
    assert result.returncode == 2
    line = one_error_line(result)
    assert line.startswith("accel launch: ")
    for piece in expected:
        assert piece in line


def test_missing_script(run_accel, one_error_line) -> None:
    result = run_accel("launch", "nope.py", "--lr", "3")
    assert result.returncode == 2
    assert one_error_line(result) == "accel launch: script nope.py does not exist"


def test_a_mistyped_script_gets_the_closest_file(run_accel, one_error_line, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('trained')\n")
    result = run_accel("launch", "trian.py")
    assert result.returncode == 2
    assert one_error_line(result) == "accel launch: script trian.py does not exist; did you mean train.py?"


def test_no_script(run_accel, one_error_line) -> None:
    result = run_accel("launch", "--cpu")
    assert result.returncode == 2
    assert "no script given" in one_error_line(result)


def test_missing_config_file_named_by_flag(run_accel, show_env_script: Path, one_error_line) -> None:
    result = run_accel("launch", "--config_file", "missing.yaml", str(show_env_script))
    assert result.returncode == 2
    assert one_error_line(result) == "accel launch: config file missing.yaml (named by --config_file) does not exist"


def test_missing_config_file_named_by_variable(run_accel, show_env_script: Path, one_error_line) -> None:
    result = run_accel("launch", str(show_env_script), extra_env={"ACCEL_CONFIG_FILE": "gone.yaml"})
    assert result.returncode == 2
    assert one_error_line(result) == "accel launch: config file gone.yaml (named by $ACCEL_CONFIG_FILE) does not exist"


@pytest.mark.parametrize(
    ("gpus", "flags", "expected"),
    [
        (1, ["--num_processes", "2"], "2 GPU processes per machine but 1 GPU(s) to run them"),
        (4, ["--num_processes", "3", "--gpu_ids", "0,1"], "3 GPU processes per machine but 2 GPU(s)"),
        (2, ["--gpu_ids", "5"], "gpu_ids 5: no GPU 5 here (2 visible: 0 to 1)"),
    ],
)
def test_more_gpu_processes_than_gpus(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                      show_env_script: Path, gpus: int, flags: list[str], expected: str) -> None:
    """No GPU here, so the GPU count is stood in for; the check and the message are the real ones."""
    monkeypatch.setattr(capabilities, "gpu_count", lambda: gpus)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(show_env_script.parent / "xdg"))
    status = main(["launch", *flags, str(show_env_script)])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert len(err) == 1 and err[0].startswith("accel launch: ") and expected in err[0]
