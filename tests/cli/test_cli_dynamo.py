"""torch.compile's settings on the command line: dynamo_config in config.yaml (accel's and Accelerate's),
the --dynamo_* flags over it, and the ACCEL_DYNAMO_* variables the script gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from accel.cli.config.file import load_config, render
from accel.cli.errors import CliError
from tests.cli.test_cli_launch import reports


def test_dynamo_config_is_read_and_written_back(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("dynamo_config:\n  dynamo_backend: INDUCTOR\n  dynamo_mode: max-autotune\n"
                      "  dynamo_use_fullgraph: true\n  dynamo_use_dynamic: false\n")
    values = load_config(config, "accel launch")
    assert values == {"dynamo_backend": "inductor", "dynamo_mode": "max-autotune", "dynamo_use_fullgraph": True,
                      "dynamo_use_dynamic": False}
    rewritten = tmp_path / "again.yaml"
    rewritten.write_text(render(values))
    assert load_config(rewritten, "accel launch") == values


@pytest.mark.parametrize(("section", "message"), [
    ("  dynamo_backed: inductor\n", "unknown key dynamo_config.dynamo_backed; did you mean dynamo_config.dynamo_backend?"),
    ("  dynamo_backend: inductr\n", "dynamo_config.dynamo_backend='inductr' is not accepted.*Did you mean 'inductor'"),
    ("  dynamo_use_fullgraph: 3\n", "dynamo_config.dynamo_use_fullgraph=3 is not accepted; accepted: true or false"),
])
def test_a_bad_dynamo_config_names_the_key(tmp_path: Path, section: str, message: str) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("dynamo_config:\n" + section)
    with pytest.raises(CliError, match=message):
        load_config(config, "accel launch")


def test_accelerates_dynamo_config_is_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "accelerate.yaml"
    config.write_text("distributed_type: 'NO'\ndynamo_config:\n  dynamo_backend: AOT_EAGER\n  dynamo_mode: default\n"
                      "  dynamo_use_fullgraph: false\n  dynamo_use_dynamic: false\n"
                      "  dynamo_use_regional_compilation: false\n")
    assert load_config(config, "accel launch") == {"dynamo_backend": "aot_eager", "dynamo_mode": "default",
                                                   "dynamo_use_fullgraph": False, "dynamo_use_dynamic": False}
    assert capsys.readouterr().err == ""
    config.write_text(config.read_text().replace("compilation: false", "compilation: true"))
    with pytest.raises(CliError, match="asks for what accel does not run.*dynamo_config.dynamo_use_regional_compilation"
                       "=True"):
        load_config(config, "accel launch")


def test_accelerates_older_top_level_dynamo_backend_is_moved_into_the_section(tmp_path: Path) -> None:
    config = tmp_path / "accelerate.yaml"
    config.write_text("distributed_type: 'NO'\ndynamo_backend: EAGER\n")
    assert load_config(config, "accel launch") == {"dynamo_backend": "eager"}


def test_flags_override_the_config_and_reach_the_script(run_accel, show_env_script: Path, tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("dynamo_config:\n  dynamo_backend: inductor\n  dynamo_use_fullgraph: true\n")
    result = run_accel("launch", "--config_file", str(config), "--dynamo_backend", "AOT_EAGER",
                       "--no-dynamo-use-fullgraph", "--dynamo_use_dynamic", str(show_env_script))
    assert result.returncode == 0, result.stderr
    env = reports(result)[0]["env"]
    assert {k: v for k, v in env.items() if "DYNAMO" in k} == {
        "ACCEL_DYNAMO_BACKEND": "aot_eager", "ACCEL_DYNAMO_USE_FULLGRAPH": "false", "ACCEL_DYNAMO_USE_DYNAMIC": "true",
    }
