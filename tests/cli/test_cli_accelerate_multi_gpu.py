"""An Accelerate config with `distributed_type: MULTI_GPU` on a machine without a GPU is refused
with the reason and the fix, instead of quietly starting CPU processes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from accel.cli.config import from_accelerate as accelerate_config
from accel.cli.errors import CliError

CONFIG = "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nmixed_precision: 'no'\nnum_processes: 2\n"


def test_translate_refuses_multi_gpu_without_a_gpu(tmp_path: Path) -> None:
    data = {"distributed_type": "MULTI_GPU", "num_processes": 2}
    with pytest.raises(CliError, match=r"MULTI_GPU, but torch sees no GPU.*distributed_type: MULTI_CPU"):
        accelerate_config.translate(data, tmp_path, "accel launch", lambda: 0)


def test_translate_keeps_multi_gpu_with_gpus_and_cpu_when_asked(tmp_path: Path) -> None:
    data = {"distributed_type": "MULTI_GPU", "num_processes": 2}
    assert accelerate_config.translate(data, tmp_path, "accel launch", lambda: 2) == {"num_processes": 2}
    with_cpu = {**data, "use_cpu": True}
    assert accelerate_config.translate(with_cpu, tmp_path, "accel launch", lambda: 0)["use_cpu"] is True


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine where torch sees no GPU")
def test_launch_with_a_multi_gpu_config_on_a_cpu_machine_starts_nothing(
    run_accel, show_env_script: Path, tmp_path: Path, one_error_line
) -> None:
    config = tmp_path / "accelerate.yaml"
    config.write_text(CONFIG)
    result = run_accel("launch", "--config_file", str(config), str(show_env_script))
    assert result.returncode == 2
    line = one_error_line(result)
    assert line.startswith(f"accel launch: {config}: distributed_type: MULTI_GPU, but torch sees no GPU")
    assert "use_cpu: true" in line and result.stdout == ""
