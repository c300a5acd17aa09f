"""The te, msamp and ao backends with the real libraries on a CUDA GPU with FP8 (skipped elsewhere).

Run them on an Ada/Hopper/Blackwell machine with the libraries installed:
`python -m pytest -m fp8_gpu tests/backends/fp8_adapters`.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from accel import Accelerator, FP8RecipeKwargs
from accel.backends.fp8.support import module_present


def _fp8_gpu_reason() -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA GPU here (torch sees none)"
    capability = torch.cuda.get_device_capability()
    if capability < (8, 9):
        return f"the GPU has compute capability {capability[0]}.{capability[1]}; FP8 needs 8.9 or newer"
    return None


def _needs(library: str, module: str) -> pytest.MarkDecorator:
    gpu = _fp8_gpu_reason()
    reason = gpu or (None if module_present(module) else f"{library} is not installed")
    return pytest.mark.skipif(reason is not None, reason=f"needs a CUDA GPU with FP8 and {library}: {reason}")


pytestmark = pytest.mark.fp8_gpu


def train(backend: str, steps: int = 20, **recipe: object) -> tuple[Accelerator, nn.Module, list[float]]:
    accelerator = Accelerator(
        mixed_precision="fp8",
        # small_layer_dim=0: these layers are below the small-layer filter's GPU default, and the test is of FP8 training
        kwarg_handlers=[FP8RecipeKwargs(backend=backend, use_autocast_during_eval=True, small_layer_dim=0, **recipe)],
    )
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.LayerNorm(128), nn.GELU(), nn.Linear(128, 64))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    x = torch.randn(256, 64, device=accelerator.device)
    y = torch.roll(x, 1, dims=1)
    losses = []
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(x).float(), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return accelerator, model, losses


@_needs("TransformerEngine", "transformer_engine")
@pytest.mark.parametrize("scaling", ["delayed", "current"])
def test_te_trains(scaling: str) -> None:
    import transformer_engine.pytorch as te

    accelerator, model, losses = train("te", scaling=scaling)
    assert isinstance(model[0], te.Linear) and isinstance(model[1], te.LayerNorm)
    assert losses[-1] < losses[0]
    assert set(accelerator.get_state_dict(model)) == {"0.weight", "0.bias", "1.weight", "1.bias", "3.weight", "3.bias"}


@_needs("MS-AMP", "msamp")
@pytest.mark.parametrize("level", ["O1", "O2"])
def test_msamp_trains(level: str) -> None:
    accelerator, model, losses = train("msamp", optimization_level=level)
    assert type(model[0]).__name__ == "FP8Linear"
    assert losses[-1] < losses[0]


@_needs("torchao", "torchao")
def test_ao_trains_on_the_gpu() -> None:
    from torchao.float8.float8_linear import Float8Linear

    _, model, losses = train("ao")
    assert isinstance(model[0], Float8Linear)
    assert losses[-1] < losses[0]
