"""Which config file is active: --config_file, else $ACCEL_CONFIG_FILE, else the XDG default."""

from __future__ import annotations

from pathlib import Path

from accel.cli.config.file import config_path, render, to_yaml_data


def test_flag_wins_over_variable_over_default() -> None:
    environ = {"ACCEL_CONFIG_FILE": "/env.yaml", "XDG_CONFIG_HOME": "/xdg"}
    assert config_path("/flag.yaml", environ) == (Path("/flag.yaml"), "--config_file")
    assert config_path(None, environ) == (Path("/env.yaml"), "$ACCEL_CONFIG_FILE")
    assert config_path(None, {"XDG_CONFIG_HOME": "/xdg"}) == (Path("/xdg/accel/config.yaml"), "the default location")
    assert config_path(None, {})[0] == Path.home() / ".config" / "accel" / "config.yaml"


def test_written_yaml_follows_the_schema_order_and_nests_the_recipe() -> None:
    values = {"fp8_margin": 1, "gradient_accumulation_steps": 2, "mixed_precision": "fp8",
              "fp8_exclude_modules": ("lm_head",), "main_process_ip": None}
    assert list(to_yaml_data(values)) == ["mixed_precision", "gradient_accumulation_steps", "fp8_config"]
    assert to_yaml_data(values)["fp8_config"] == {"margin": 1, "exclude_modules": ["lm_head"]}
    assert render(values).startswith("# accel configuration")
