"""unwrap_model, get_state_dict and save_model: the user's model and real safetensors files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, load_model
from torch import nn

from accel import Accelerator


class TiedLM(nn.Module):
    """An embedding whose weight the output layer shares, as in most language models."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(32, 16)
        self.head = nn.Linear(16, 32, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(tokens))


def test_unwrap_keeps_or_removes_the_precision_wrapper() -> None:
    accelerator = Accelerator(mixed_precision="bf16")
    model = accelerator.prepare(nn.Sequential(nn.Linear(4, 4)))
    assert accelerator.unwrap_model(model) is model and "forward" in model.__dict__
    plain = accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    assert plain is model and "forward" not in model.__dict__
    assert model(torch.randn(2, 4)).dtype == torch.float32


def test_unwrap_restores_a_users_own_instance_forward() -> None:
    model = nn.Linear(2, 2)
    custom = lambda x: x * 2  # noqa: E731
    model.forward = custom  # type: ignore[method-assign]
    accelerator = Accelerator(mixed_precision="fp16")
    accelerator.prepare(model)
    accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    assert model.forward is custom


def test_unwrap_strips_data_parallel() -> None:
    model = nn.Linear(2, 2)
    assert Accelerator().unwrap_model(nn.DataParallel(model)) is model


@pytest.mark.parametrize("precision", ["no", "fp16", "bf16", "bf16-true", "64-true"])
def test_save_model_writes_safetensors_that_load_into_a_fresh_model(tmp_path: Path, precision: str) -> None:
    torch.manual_seed(0)
    accelerator = Accelerator(mixed_precision=precision)
    model = accelerator.prepare(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)))
    (path,) = accelerator.save_model(model, tmp_path / "out")
    assert path == tmp_path / "out" / "model.safetensors"
    fresh = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).to(accelerator.precision.param_dtype)
    fresh.load_state_dict(load_file(path), strict=True)
    for a, b in zip(fresh.parameters(), accelerator.unwrap_model(model).parameters()):
        assert torch.equal(a, b)


def test_tied_weights_are_saved_once_and_restored(tmp_path: Path) -> None:
    accelerator = Accelerator()
    model = accelerator.prepare(TiedLM())
    (path,) = accelerator.save_model(model, tmp_path)
    assert set(load_file(path)) == {"embed.weight"}
    fresh = TiedLM()
    load_model(fresh, path)
    assert torch.equal(fresh.head.weight, model.embed.weight)
    assert fresh.head.weight is fresh.embed.weight


def test_get_state_dict_has_the_original_names() -> None:
    accelerator = Accelerator(mixed_precision="fp16")
    model = nn.Sequential(nn.Linear(2, 2))
    names = set(model.state_dict())
    assert set(accelerator.get_state_dict(accelerator.prepare(model))) == names


def test_save_model_refuses_a_file_path_and_a_bad_shard_size(tmp_path: Path) -> None:
    accelerator = Accelerator()
    model = accelerator.prepare(nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"max_shard_size\)='ten' is not accepted"):
        accelerator.save_model(model, tmp_path, max_shard_size="ten")
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(NotADirectoryError, match="that path is a file"):
        accelerator.save_model(model, file)
