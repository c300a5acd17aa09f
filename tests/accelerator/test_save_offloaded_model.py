"""save_model of a model whose weights Accelerate's load_checkpoint_and_dispatch offloaded to the CPU
and disk: the files hold the real weights, not the meta-device placeholders."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from accel import Accelerator, load_checkpoint_and_dispatch


def test_save_model_loads_the_offloaded_weights_back(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    expected = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    accelerator = Accelerator(cpu=True)
    accelerator.save_model(model, tmp_path / "first")
    load_checkpoint_and_dispatch(model, str(tmp_path / "first"), device_map={"0": "cpu", "1": "disk"},
                                 offload_folder=str(tmp_path / "offload"))
    assert model[1].weight.device.type == "meta"  # offloaded: the module holds a placeholder
    accelerator.save_model(model, tmp_path / "second")
    saved = load_file(str(tmp_path / "second" / "model.safetensors"))
    assert saved.keys() == expected.keys()
    assert all(torch.equal(saved[name], expected[name]) for name in expected)
