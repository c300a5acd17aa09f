"""save_model's files as transformers and Accelerate read them: shards with an index, .bin without pickled code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from accel import Accelerator
from accel.checkpointing.model_files import parse_size


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16), nn.Linear(16, 4))


def _read_sharded(folder: Path, index_name: str, load: object) -> dict[str, torch.Tensor]:
    index = json.loads((folder / index_name).read_text())
    tensors: dict[str, torch.Tensor] = {}
    for file in sorted(set(index["weight_map"].values())):
        tensors.update(load(folder / file))  # type: ignore[operator]
    assert set(tensors) == set(index["weight_map"])
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in tensors.values())
    return tensors


def test_a_small_shard_size_writes_shards_and_an_index_that_rebuild_the_model(tmp_path: Path) -> None:
    accelerator = Accelerator()
    model = accelerator.prepare(_model())
    files = accelerator.save_model(model, tmp_path, max_shard_size="3KB")
    names = sorted(p.name for p in files)
    shards = [n for n in names if n.endswith(".safetensors")]
    assert len(shards) >= 2 and "model.safetensors.index.json" in names
    assert all(name.startswith("model-") and f"-of-{len(shards):05d}" in name for name in shards)
    for shard in shards:
        size = sum(t.numel() * t.element_size() for t in load_file(tmp_path / shard).values())
        assert size <= 3000 or len(load_file(tmp_path / shard)) == 1
    tensors = _read_sharded(tmp_path, "model.safetensors.index.json", lambda p: load_file(p))
    fresh = _model()
    fresh.load_state_dict(tensors)
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), model.state_dict().values()))


def test_unsafe_serialization_writes_tensors_only_bin_files_that_load_weights_only(tmp_path: Path) -> None:
    accelerator = Accelerator()
    model = accelerator.prepare(_model())
    (path,) = accelerator.save_model(model, tmp_path, safe_serialization=False)
    assert path.name == "pytorch_model.bin"
    loaded = torch.load(path, weights_only=True)
    assert all(torch.equal(loaded[k], v) for k, v in model.state_dict().items())
    files = accelerator.save_model(model, tmp_path / "sharded", max_shard_size=1500, safe_serialization=False)
    assert "pytorch_model.bin.index.json" in {p.name for p in files}
    tensors = _read_sharded(tmp_path / "sharded", "pytorch_model.bin.index.json",
                            lambda p: torch.load(p, weights_only=True))
    assert set(tensors) == set(model.state_dict())


def test_saving_again_replaces_the_earlier_shards(tmp_path: Path) -> None:
    accelerator = Accelerator()
    model = accelerator.prepare(_model())
    accelerator.save_model(model, tmp_path, max_shard_size="2KB")
    accelerator.save_model(model, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]


def test_save_writes_on_the_main_process_as_torch_save_or_safetensors(tmp_path: Path) -> None:
    accelerator = Accelerator()
    state = {"w": torch.arange(4.0)}
    accelerator.save(state, tmp_path / "state.pt")
    assert torch.equal(torch.load(tmp_path / "state.pt", weights_only=True)["w"], state["w"])
    accelerator.save(state, tmp_path / "state.safetensors", safe_serialization=True)
    assert torch.equal(load_file(tmp_path / "state.safetensors")["w"], state["w"])


def test_save_as_safetensors_writes_tied_weights_once_and_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # safetensors refuses two names for one memory; Accelerate drops the later name with this warning.
    tied = nn.ModuleDict({"a": nn.Linear(8, 8), "b": nn.Linear(8, 8)})
    tied["b"].weight = tied["a"].weight
    with caplog.at_level("WARNING"):
        Accelerator().save(tied.state_dict(), tmp_path / "tied.safetensors", safe_serialization=True)
    written = load_file(tmp_path / "tied.safetensors")
    assert set(written) == {"a.weight", "a.bias", "b.bias"}
    assert torch.equal(written["a.weight"], tied["a"].weight.detach())
    assert [r.getMessage() for r in caplog.records if "Removed shared tensor ['b.weight']" in r.getMessage()]


@pytest.mark.parametrize(("value", "size"), [("10GB", 10**10), ("500MB", 5 * 10**8), ("2GiB", 2 * 2**30), (123, 123)])
def test_shard_sizes_are_read_as_transformers_reads_them(value: object, size: int) -> None:
    assert parse_size("max_shard_size", value) == size  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["", "ten", 0, -5, True, "5XB"])
def test_bad_shard_sizes_are_refused(value: object) -> None:
    with pytest.raises(ValueError, match="is not accepted: give a size in bytes"):
        parse_size("max_shard_size", value)  # type: ignore[arg-type]
