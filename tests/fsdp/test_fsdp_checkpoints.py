"""Sharded checkpoints with real processes: saved by 2, resumed by 2 bit-identically (sharded and
full forms), resumed by 1 (resharding), consolidated into a safetensors file a plain model loads,
and refused, naming the weights, for a model of other shapes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from launching import Launched, launch
from fsdp_tiny import make_model

SCRIPT = str(Path(__file__).parent / "fsdp_checkpoint_script.py")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fsdp_checkpoints")


@pytest.fixture(scope="module")
def saved(folder: Path) -> Launched:
    result = launch(SCRIPT, "save", str(folder), timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def resumed_on_one(saved: Launched, folder: Path) -> Launched:
    result = launch(SCRIPT, "resume", str(folder), processes=1, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def tensors(state: dict[str, list]) -> dict[str, torch.Tensor]:
    return {name: torch.tensor(values) for name, values in state.items()}


def test_each_process_writes_its_own_shards(saved: Launched, folder: Path) -> None:
    names = sorted(p.name for p in (folder / "sharded").iterdir())
    assert names == [".metadata", "__0_0.distcp", "__1_0.distcp"]


@pytest.mark.parametrize("form", ["sharded", "full"])
def test_resuming_on_two_processes_continues_bit_identically(saved: Launched, form: str) -> None:
    uninterrupted = saved.of("uninterrupted")[0]
    resumed = saved.of(f"resumed_{form}")[0]
    assert resumed and resumed == uninterrupted  # exact: JSON holds every float32 exactly
    assert saved.of("at_save")[0] != uninterrupted  # the two steps after the save did train


def test_a_two_process_checkpoint_resumes_on_one_process(saved: Launched, resumed_on_one: Launched) -> None:
    assert resumed_on_one.of("one_process_sharded") == ["TinyNet"]  # one process: nothing to shard
    uninterrupted = tensors(saved.of("uninterrupted")[0])
    one = tensors(resumed_on_one.of("resumed_one")[0])
    assert one.keys() == uninterrupted.keys()
    for name in one:  # the same global batch, summed in another order: float tolerance
        torch.testing.assert_close(one[name], uninterrupted[name], rtol=1e-5, atol=1e-6)


def test_consolidate_writes_a_safetensors_file_a_plain_model_loads(saved: Launched, folder: Path) -> None:
    assert saved.results[0]["consolidated"] == str(folder / "consolidated" / "model.safetensors")
    model = make_model(seed=5)
    model.load_state_dict(load_file(folder / "consolidated" / "model.safetensors"))  # strict: every name
    expected = tensors(saved.of("at_save")[0])
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, expected[name]), name


def test_the_consolidate_command_accepts_the_checkpoints_parent_folder(saved: Launched, folder: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "accel.fsdp.consolidate", str(folder), str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"wrote {tmp_path / 'model.safetensors'}"
    again, first = load_file(tmp_path / "model.safetensors"), load_file(folder / "consolidated" / "model.safetensors")
    assert again.keys() == first.keys() and all(torch.equal(again[k], first[k]) for k in first)


def test_a_checkpoint_of_other_shapes_is_refused_naming_the_weights(saved: Launched) -> None:
    for message in saved.of("mismatch"):
        assert message is not None
        assert "does not fit this model" in message
        assert "embed.weight (checkpoint (16, 8), model (24, 8))" in message
