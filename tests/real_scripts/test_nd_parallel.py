"""Accelerate's examples/torch_native_parallelism/nd_parallel.py (fixtures/torch_native_parallelism/), unchanged
but for its import lines, under accel on 2 and 4 CPU processes, in each layout its README runs: FSDP2
(--dp-shard-size 2), DDP (--dp-replicate-size 2), tensor parallelism with the model split by transformers
(--tp-size 2: `from_pretrained(tp_plan="auto", device_mesh=accelerator.torch_device_mesh)`), and HSDP
(--dp-replicate-size 2 --dp-shard-size 2). Accelerate itself refuses every one of them on CPU processes
("ParallelismConfig is only compatible ... but got MULTI_CPU"), so the comparison is with one process
(nd_reference.py: the same steps, the global batch at once): the loss of each step, averaged over the
processes that read different batches, equals the one process's within bf16's precision (the script trains in
bf16). Each run goes to its end: the script's `save_state` at step 3 and its closing `model.save_pretrained`
(a loadable model with the one process's weight names).

The script's performance line reads GPU memory (`torch.accelerator.current_accelerator().type`, None on a CPU
machine) once 5 warm-up steps are done, under any framework; the runs stop at 4 steps, before it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from real_script_runs import Run, _environment, finish, start, write_scripts
from real_script_standins import link_into
from safetensors.torch import load_file

HERE = Path(__file__).parent
FIXTURE = "torch_native_parallelism/nd_parallel.py"
STEPS, LENGTH = 4, 16
ARGS = ("--num-steps", str(STEPS), "--sequence-length", str(LENGTH), "--model-name", "tiny-llama",
        "--checkpoint-frequency", "3")
LAYOUTS = {  # name: (processes, flags, data-parallel places)
    "fsdp2": (2, ("--dp-shard-size", "2"), 2),
    "ddp": (2, ("--dp-replicate-size", "2"), 2),
    "tp": (2, ("--tp-size", "2"), 1),
    "hsdp": (4, ("--dp-replicate-size", "2", "--dp-shard-size", "2"), 4),
}

pytestmark = [pytest.mark.usefixtures("hf_zygote"), pytest.mark.filterwarnings("ignore")]


def _reference(folder: Path, standins: Path, places: int) -> Run:
    workdir = folder / f"reference-{places}"
    link_into(standins, workdir)
    script_dir = workdir / "script"
    write_scripts(FIXTURE, "accel", script_dir)
    record = workdir / "record"
    record.mkdir()
    command = [sys.executable, str(HERE / "nd_reference.py"), str(places), str(STEPS), str(LENGTH)]
    process = subprocess.Popen(command, cwd=workdir, env=_environment(record, None, (script_dir,)),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    return finish(process, record, time.monotonic(), "accel", 1)


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory, standins: Path) -> dict[int, list[float]]:
    """The one process's losses, by number of places (the global batch)."""
    folder = tmp_path_factory.mktemp("nd-reference")
    out = {}
    for places in sorted({places for _, _, places in LAYOUTS.values()}):
        run = _reference(folder, standins, places)
        run.check_succeeded()
        out[places] = run.losses()
    return out


@pytest.mark.parametrize("layout", LAYOUTS)
def test_nd_parallel_runs_each_layout_and_trains_as_one_process(
    layout: str, references: dict[int, list[float]], standins: Path, tmp_path: Path
) -> None:
    processes, flags, places = LAYOUTS[layout]
    run = finish(*start(FIXTURE, "accel", processes, [*ARGS, *flags], tmp_path, standins), "accel", processes)
    run.check_succeeded()
    assert run.printed("Training completed!") and run.printed("Model saved to")
    per_rank = [run.losses(rank) for rank in range(processes)]
    steps = [sum(losses[step] for losses in per_rank) / processes for step in range(STEPS)]  # tp ranks agree
    assert len(references[places]) == STEPS
    assert steps == pytest.approx(references[places], rel=2e-3)  # bf16 runs (measured here: 6e-5 at most)
    saved = load_file(tmp_path / "outputs" / "tiny-llama" / "model.safetensors")
    assert "model.layers.1.self_attn.q_proj.weight" in saved and saved["model.embed_tokens.weight"].shape[1] == 32
    if "--dp-shard-size" in flags:
        assert (tmp_path / "outputs" / "checkpoint-3").is_dir()  # the script saves state only when it shards
