"""Every backend's conversion report lists what it does not convert: transformers' Conv1D (which te,
ao and msamp leave alone: their libraries replace nn.Linear only) and other weight matrices."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from accel import Accelerator, FP8RecipeKwargs
from accel.backends.conversion import CONV1D_REFUSED

Conv1D = pytest.importorskip("transformers.pytorch_utils", reason="transformers is not installed").Conv1D


class Net(nn.Module):
    """An embedding, a transformers Conv1D (GPT-2's linear layer) and an nn.Linear."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(50, 32)
        self.proj = Conv1D(64, 32)
        self.head = nn.Linear(64, 16)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.proj(self.embed(ids))))


def prepare(backend: str, **recipe: object) -> tuple[Accelerator, nn.Module]:
    accelerator = Accelerator(
        mixed_precision="fp8",
        kwarg_handlers=[FP8RecipeKwargs(backend=backend, base_precision="fp32", use_autocast_during_eval=True, **recipe)],
    )
    model = Net()
    model, _ = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    return accelerator, model


def check_report(accelerator: Accelerator, library_words: str) -> None:
    report = accelerator.conversion_report
    assert report.summary() == (
        "FP8: converted 1 of 2 Linear and Conv1D layers (skipped: 1 Conv1D (converted by backend='native' only)); "
        "weight matrices outside FP8: 1 Embedding"
    )
    proj = report.layers[0]
    assert (proj.name, proj.kind, proj.category) == ("proj", "Conv1D", CONV1D_REFUSED)
    assert library_words in proj.reason and "backend='native' converts Conv1D" in proj.reason
    assert proj.line().startswith("proj (Conv1D 32 -> 64): skipped: transformers' Conv1D")
    (embed,) = report.others
    assert (embed.name, embed.kind, embed.parameter, embed.shape) == ("embed", "Embedding", "weight", (50, 32))
    assert "not a matrix product" in embed.reason
    assert "embed (Embedding, weight 50x32): not in FP8: a table look-up" in report.details()


def test_te_reports_conv1d_and_embedding(fake_te: Any, fp8_gpu: Any) -> None:
    fake_te.install()
    accelerator, model = prepare("te")
    check_report(accelerator, "te.Linear replaces nn.Linear only")
    assert type(model.proj) is Conv1D and isinstance(model.head, fake_te.te.Linear)


def test_msamp_reports_conv1d_and_embedding_and_leaves_it_alone(fake_msamp: Any, fp8_gpu: Any) -> None:
    fake_msamp.install()
    accelerator, model = prepare("msamp")
    check_report(accelerator, "LinearReplacer replaces nn.Linear only")
    assert type(model.proj) is Conv1D and not hasattr(model.proj, "use_fp32_linear")
    assert type(model.head).__module__ == "msamp.nn"


def test_ao_reports_conv1d_and_embedding() -> None:
    pytest.importorskip("torchao.float8", reason="torchao is not installed")
    accelerator, model = prepare("ao")
    check_report(accelerator, "convert_to_float8_training swaps nn.Linear only")
    assert type(model.proj) is Conv1D and type(model.head).__name__ == "Float8Linear"


def test_native_converts_the_conv1d() -> None:
    from accel.backends.native_fp8 import Float8Conv1D

    accelerator, model = prepare("native", optimization_level="O1")
    assert accelerator.conversion_report.summary() == (
        "FP8: converted 2 of 2 Linear and Conv1D layers; weight matrices outside FP8: 1 Embedding"
    )
    assert isinstance(model.proj, Float8Conv1D)
    loss = model(torch.randint(0, 50, (4, 16))).square().mean()
    accelerator.backward(loss)
    assert model.proj.compact is not None  # O1: 16-bit weight, FP8 gradient in the Conv1D layout
    assert model.proj.compact.weight.grad.take().shape == (32, 64)
