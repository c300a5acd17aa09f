"""The `ao` backend for real: torchao float8 training on this CPU (skipped where torchao is missing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from accel import Accelerator, FP8RecipeKwargs
from accel.backends.fp8.ao import TorchAOFP8

pytest.importorskip("torchao.float8", reason="torchao is not installed (pip install torchao)")
from torchao.float8.float8_linear import Float8Linear  # noqa: E402


def ao_accelerator(**recipe: object) -> Accelerator:
    """The ao backend; FP8 numerics are compared with fp32, so the base is fp32 unless a test says otherwise."""
    recipe.setdefault("base_precision", "fp32")
    return Accelerator(mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(backend="ao", **recipe)])


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(32, 64)
        self.attn = nn.MultiheadAttention(64, 4, batch_first=True)
        self.mid = nn.Linear(64, 64)
        self.head = nn.Linear(64, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x))
        h = self.attn(h, h, h, need_weights=False)[0]
        return self.head(torch.relu(self.mid(h)))


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 3))


def data(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 8, 32, generator=generator)
    return x, x[..., :3] * 2 - 1


def train(accelerator: Accelerator, model: nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> list[float]:
    x, y = data()
    losses = []
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def prepared(accelerator: Accelerator) -> tuple[nn.Module, torch.optim.Optimizer]:
    model = mlp()
    return accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-2))


# ----------------------------------------------------------------------------- conversion
def test_conversion_follows_the_shared_rule_and_keeps_the_parameters() -> None:
    torch.manual_seed(0)
    model = Net()
    names, weights = set(model.state_dict()), {n: p for n, p in model.named_parameters()}
    accelerator = ao_accelerator(exclude_modules=("mid",))
    model = accelerator.prepare(model)
    assert isinstance(model.inp, Float8Linear)
    assert not isinstance(model.mid, Float8Linear) and not isinstance(model.head, Float8Linear)
    assert not isinstance(model.attn.out_proj, Float8Linear)
    assert all(weights[n] is p for n, p in model.named_parameters())
    assert set(accelerator.get_state_dict(model)) == names
    report = accelerator.precision.conversion_report
    assert report.summary() == ("FP8: converted 1 of 4 Linear layers (skipped: 1 not a multiple of 16, 1 excluded, "
                                "1 inside MultiheadAttention); weight matrices outside FP8: 1 MultiheadAttention")


def test_a_model_already_converted_is_reported_as_such() -> None:
    accelerator = ao_accelerator()
    model = accelerator.prepare(nn.Sequential(nn.Linear(16, 16)))
    ao_accelerator().prepare(model)
    assert isinstance(model[0], Float8Linear)


def test_nothing_to_convert_raises() -> None:
    with pytest.raises(ValueError, match="found no linear layer .* it can run in FP8"):
        ao_accelerator().prepare(nn.Sequential(nn.Linear(10, 3)))


@pytest.mark.parametrize(("recipe", "grad_dtype"), [
    ({}, torch.float8_e5m2),
    ({"fp8_format": "E4M3"}, torch.float8_e4m3fn),
    ({"scaling": "rowwise"}, torch.float8_e4m3fn),
    ({"scaling": "rowwise_with_gw_hp", "fp8_format": "E4M3"}, torch.float8_e4m3fn),
])
def test_recipe_maps_to_torchaos_config(recipe: Any, grad_dtype: Any) -> None:
    config = ao_accelerator(**recipe).precision.ao_config
    assert config.cast_config_input.target_dtype == torch.float8_e4m3fn
    assert config.cast_config_grad_output.target_dtype == grad_dtype


# ----------------------------------------------------------------------------- training
@pytest.mark.parametrize("scaling", ["current", "rowwise", "rowwise_with_gw_hp"])
def test_a_few_training_steps_lower_the_loss(scaling: Any) -> None:
    accelerator = ao_accelerator(scaling=scaling)
    model, optimizer = prepared(accelerator)
    losses = train(accelerator, model, optimizer, 10)
    assert losses[-1] < 0.5 * losses[0]
    assert accelerator.step_stats == {"skipped_steps": 0}


def test_fp8_runs_while_training_and_high_precision_in_eval_unless_asked() -> None:
    torch.manual_seed(0)
    layer, x = nn.Linear(64, 64), torch.randn(16, 64)
    exact = layer(x).detach()
    for in_eval in (False, True):
        model = ao_accelerator(use_autocast_during_eval=in_eval).prepare(nn.Sequential(_copy(layer)))
        training = model(x).detach()
        model.eval()
        evaluated = model(x).detach()
        assert not torch.allclose(training, exact, rtol=0, atol=1e-6)  # FP8 rounding shows
        torch.testing.assert_close(evaluated, training if in_eval else exact)
        model.train()
        torch.testing.assert_close(model(x).detach(), training)


def test_onednn_is_turned_off_only_while_fp8_runs() -> None:
    accelerator = ao_accelerator()
    model, optimizer = prepared(accelerator)
    seen = []
    model[0].register_forward_hook(lambda *_: seen.append(torch._C._get_mkldnn_enabled()))
    train(accelerator, model, optimizer, 1)
    assert seen == [False] and torch._C._get_mkldnn_enabled()


def test_a_step_with_nonfinite_gradients_is_skipped() -> None:
    accelerator = ao_accelerator()
    model, optimizer = prepared(accelerator)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    x, _ = data()
    accelerator.backward(model(x * float("inf")).sum())
    optimizer.step()
    assert accelerator.optimizer_step_was_skipped and accelerator.step_stats == {"skipped_steps": 1}
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())


def test_checkpoint_round_trip_resumes_exactly(tmp_path: Path) -> None:
    accelerator = ao_accelerator()
    model, optimizer = prepared(accelerator)
    train(accelerator, model, optimizer, 2)
    accelerator.save_state(tmp_path / "ckpt")
    expected = train(accelerator, model, optimizer, 2)

    resumed = ao_accelerator()
    model, optimizer = prepared(resumed)
    resumed.load_state(tmp_path / "ckpt")
    assert train(resumed, model, optimizer, 2) == expected


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(("recipe", "message"), [
    ({"scaling": "delayed"}, "torchao removed delayed scaling"),
    ({"scaling": "rowwise", "fp8_format": "HYBRID"},
     r"fp8_format='HYBRID'\) cannot run on the 'ao' FP8 backend: it always runs fp8_format='E4M3'"),
    ({"margin": 1}, "sets margin, which the 'ao' FP8 backend cannot honour"),
    ({"amax_history_len": 16}, "sets amax_history_len, which the 'ao' FP8 backend cannot honour"),
    ({"optimization_level": "O2"}, "sets optimization_level, which the 'ao' FP8 backend cannot honour"),
    ({"scaling": "nvfp4"}, "scaling='nvfp4'.*'ao'"),
])
def test_recipe_fields_ao_cannot_honour_raise(recipe: Any, message: Any) -> None:
    with pytest.raises(ValueError, match=message):
        ao_accelerator(**recipe)


def test_availability_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    assert TorchAOFP8.availability(torch.device("cpu")) is None
    mps = TorchAOFP8.availability(torch.device("mps"))
    assert mps == "torchao float8 training runs on CPU and CUDA GPUs, not on mps"
    monkeypatch.setattr("accel.backends.fp8.ao.library_version", lambda module, names: "0.9.1")
    assert TorchAOFP8.availability(torch.device("cpu")) == (
        "torchao 0.9.1 is installed, accel needs 0.10 or newer (install it with: pip install torchao "
        "(or accel's extra: pip install 'accel[ao]'))")
    monkeypatch.setattr("accel.backends.fp8.ao.module_present", lambda name: False)
    assert TorchAOFP8.availability(torch.device("cpu")).startswith("torchao is not installed (install it with:")


def _copy(layer: nn.Linear) -> nn.Linear:
    twin = nn.Linear(layer.in_features, layer.out_features)
    twin.load_state_dict(layer.state_dict())
    return twin


def test_a_token_count_that_is_not_a_multiple_of_16_trains_under_cudas_scaled_mm_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CUDA's _scaled_mm needs the contracted dimension to be a multiple of 16; for the weight gradient that
    is the token count, which a last partial batch breaks. The CPU kernel does not check, so this stand-in
    of the CUDA rule wraps it. accel turns on torchao's pad_inner_dim (as Accelerate does)."""
    real = torch._scaled_mm

    def cuda_rule(a: torch.Tensor, b: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if a.shape[1] % 16 or b.shape[0] % 16 or b.shape[1] % 16:
            raise RuntimeError(f"mat dims must be divisible by 16, got {tuple(a.shape)} @ {tuple(b.shape)}")
        return real(a, b, *args, **kwargs)

    monkeypatch.setattr(torch, "_scaled_mm", cuda_rule)
    accelerator = ao_accelerator()
    model, optimizer = prepared(accelerator)
    x = torch.randn(5, 32)  # 5 tokens
    loss = nn.functional.mse_loss(model(x), x[:, :3])
    accelerator.backward(loss)  # raised "mat dims must be divisible by 16" before pad_inner_dim
    optimizer.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert accelerator.precision.ao_config.pad_inner_dim
