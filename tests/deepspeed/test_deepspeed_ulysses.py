"""DeepSpeed's own sequence parallelism (`ParallelismConfig(sp_size=2, sp_backend="deepspeed")` with a DeepSpeedPlugin,
as Accelerate runs it) on 2 CPU processes: DeepSpeed's attention wrapper and dataloader adapter, the loss over the
group computed by the script as Accelerate's guide does. DeepSpeed's ZeRO reduction adds the sp ranks' gradients
(it divides by the data-parallel size over sp_size), and the guide's all-gathered loss already gives each rank the
gradient of the whole loss, so the step is sp_size times one process's: exactly one process's at sp_size times
the learning rate (SGD), which is what is checked. Adam hides the factor; SGD shows it (docs/long-context.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from launching import launch

from accel import Accelerator, ParallelismConfig


@pytest.mark.filterwarnings("ignore")
def test_deepspeeds_ulysses_trains_as_one_process() -> None:
    runs = {}
    for processes, lr in ((1, "0.2"), (2, "0.1")):
        done = launch(str(Path(__file__).parent / "ds_ulysses_script.py"), str(processes), lr, processes=processes,
                      timeout=300)
        assert done.returncode == 0, done.stderr[-4000:]
        runs[processes] = done
    reference = runs[1].of("losses")[0]
    assert len(reference) == 4
    for losses in runs[2].of("losses"):  # the adapter: each rank's batch in turn, split over both
        assert losses == pytest.approx(reference, rel=1e-5)


def test_without_a_deepspeed_plugin_it_is_refused_naming_both_ways() -> None:
    with pytest.raises(ValueError, match="pass a DeepSpeedPlugin .* or use sp_backend='torch'"):
        Accelerator(cpu=True, parallelism_config=ParallelismConfig(sp_size=2, sp_backend="deepspeed"))
