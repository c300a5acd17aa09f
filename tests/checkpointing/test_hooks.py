"""save_state / load_state pre-hooks, used as diffusers uses them: a model saved and loaded by the user's own code."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from accel import Accelerator
from accel.checkpointing import CheckpointError


def _setup() -> tuple[Accelerator, nn.Module, nn.Module]:
    torch.manual_seed(0)
    accelerator = Accelerator()
    first, second = accelerator.prepare(nn.Linear(3, 3), nn.Linear(3, 2))
    return accelerator, first, second


def _save_second_myself(models: list[nn.Module], weights: list[dict[str, torch.Tensor]], output_dir: str) -> None:
    save_file(models[1].state_dict(), str(Path(output_dir) / "mine.safetensors"))
    weights.pop()


def _load_second_myself(models: list[nn.Module], input_dir: str) -> None:
    model = models.pop()
    model.load_state_dict(load_file(str(Path(input_dir) / "mine.safetensors")))


def test_a_model_saved_and_loaded_by_hooks_round_trips_and_accel_skips_it(tmp_path: Path) -> None:
    accelerator, first, second = _setup()
    handle = accelerator.register_save_state_pre_hook(_save_second_myself)
    folder = accelerator.save_state(tmp_path / "ckpt")
    names = {p.name for p in folder.iterdir()}
    assert "mine.safetensors" in names and "model.safetensors" in names and "model_1.safetensors" not in names
    saved = [p.detach().clone() for p in (*first.parameters(), *second.parameters())]
    with torch.no_grad():
        for p in (*first.parameters(), *second.parameters()):
            p.add_(1.0)
    accelerator.register_load_state_pre_hook(_load_second_myself)
    accelerator.load_state(folder)
    assert all(torch.equal(a, b) for a, b in zip(saved, (*first.parameters(), *second.parameters())))
    handle.remove()
    assert accelerator._save_state_pre_hooks == {}


def test_without_the_load_hook_the_missing_model_is_named(tmp_path: Path) -> None:
    accelerator, _, _ = _setup()
    accelerator.register_save_state_pre_hook(_save_second_myself)
    folder = accelerator.save_state(tmp_path / "ckpt")
    fresh, *_ = _setup()
    with pytest.raises(CheckpointError, match="model_1.safetensors"):
        fresh.load_state(folder)


def test_hooks_must_be_callable_and_options_accel_has_no_use_for_are_refused(tmp_path: Path) -> None:
    accelerator, _, _ = _setup()
    with pytest.raises(TypeError, match="give a function"):
        accelerator.register_save_state_pre_hook("not a function")  # type: ignore[arg-type]
    with pytest.warns(UserWarning, match="safe_serialization=False.*always safetensors"):
        folder = accelerator.save_state(tmp_path / "x", safe_serialization=False)
    assert (folder / "model.safetensors").is_file()
    with pytest.raises(ValueError, match="max_shard_size='1GB'"):
        accelerator.save_state(tmp_path / "y", max_shard_size="1GB")
    with pytest.raises(ValueError, match="load_kwargs"):
        accelerator.load_state(tmp_path / "x", load_kwargs={"map_location": "cpu"})


def test_registering_objects_without_state_dict_lists_every_bad_item() -> None:
    accelerator, _, _ = _setup()
    with pytest.raises(ValueError, match=r"index 0 \(int\).*index 2 \(str\)"):
        accelerator.register_for_checkpointing(1, torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=0.1), "x")


def test_hooks_get_the_users_models_without_the_wrappers_prepare_added(tmp_path: Path) -> None:
    """As under Accelerate, whose hooks get the models as they were before DDP or compile wrapped them
    (diffusers calls `model.save_pretrained` on them)."""
    accelerator = Accelerator(dynamo_backend="eager")
    plain = nn.Linear(3, 3)
    prepared = accelerator.prepare(plain)
    assert prepared is not plain  # compiled
    seen: list[list[nn.Module]] = []
    accelerator.register_save_state_pre_hook(lambda models, weights, output_dir: seen.append(list(models)))
    accelerator.register_load_state_pre_hook(lambda models, input_dir: seen.append(list(models)))
    accelerator.load_state(accelerator.save_state(tmp_path / "ckpt"))
    assert [[type(m) for m in models] for models in seen] == [[nn.Linear], [nn.Linear]]
    assert all(models[0] is plain for models in seen)
