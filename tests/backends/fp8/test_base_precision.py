"""FP8RecipeKwargs.base_precision on every backend: what runs outside the FP8 GEMMs.

native and ao run for real on this CPU, te and msamp against the stand-ins (conftest.py).
Models are tiny: bf16 and fp16 matrix products are emulated (slow) on this CPU.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import accel._warnings as accel_warnings
from accel import Accelerator, FP8RecipeKwargs, GradScalerKwargs
from accel._warnings import PrecisionWarning
from accel.backends.amp import BF16Mixed, FP16Mixed
from accel.backends.full import FullPrecision
from accel.backends.half import BF16True

BACKENDS = ["native", "ao", "te", "msamp"]


class Net(nn.Module):
    """Two FP8 Linears around a LayerNorm and a Linear kept out of FP8 (`plain`), whose dtype tells the base."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.norm = nn.LayerNorm(32)
        self.plain = nn.Linear(32, 32)
        self.down = nn.Linear(32, 16)
        self.seen: dict[str, torch.dtype] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.plain(self.norm(self.up(x)))
        self.seen = {"input": x.dtype, "plain_out": h.dtype}
        return self.down(torch.relu(h))


@pytest.fixture
def libraries(fake_te: Any, fake_msamp: Any, fp8_gpu: Any) -> None:
    """The te and msamp stand-ins on a pretend FP8 GPU (native and ao run for real either way)."""
    fake_te.install()
    fake_msamp.install()


def accelerator_for(backend: str, *handlers: Any, **recipe: Any) -> Accelerator:
    if backend == "msamp":
        recipe.setdefault("use_autocast_during_eval", True)
    recipe.setdefault("exclude_modules", ["plain"])
    return Accelerator(mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(backend=backend, **recipe), *handlers])


def train_steps(accelerator: Accelerator, steps: int = 2, scale: float = 1.0) -> tuple[Net, Any, list[float]]:
    torch.manual_seed(0)
    model = Net()
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-2, eps=1e-6))
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    losses = []
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(x).float(), y) * scale
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return model, optimizer, losses


@pytest.mark.parametrize("backend", BACKENDS)
def test_default_base_is_bf16_mixed_outside_the_fp8_gemms(libraries: None, backend: str) -> None:
    accelerator = accelerator_for(backend)
    assert accelerator.precision.recipe.base_precision == "bf16"
    assert isinstance(accelerator.precision.base, BF16Mixed)
    model, _, losses = train_steps(accelerator)
    assert model.seen == {"input": torch.float32, "plain_out": torch.bfloat16}  # fp32 inputs, bf16 compute
    assert {value.dtype for value in accelerator.get_state_dict(model).values()} == {torch.float32}
    assert all(torch.isfinite(torch.tensor(losses)))
    with accelerator.autocast():
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16


@pytest.mark.parametrize("backend", BACKENDS)
def test_fp32_base_is_the_old_behaviour(libraries: None, backend: str) -> None:
    accelerator = accelerator_for(backend, base_precision="fp32")
    assert isinstance(accelerator.precision.base, FullPrecision)
    model, _, _ = train_steps(accelerator, steps=1)
    assert model.seen == {"input": torch.float32, "plain_out": torch.float32}


@pytest.mark.parametrize("backend", BACKENDS)
def test_fp16_base_scales_the_loss_and_skips_an_overflowing_step(libraries: None, backend: str) -> None:
    accelerator = accelerator_for(backend, GradScalerKwargs(init_scale=1024.0), base_precision="fp16")
    assert isinstance(accelerator.precision.base, FP16Mixed)
    model, _, _ = train_steps(accelerator, steps=1)
    assert model.seen["plain_out"] == torch.float16
    assert accelerator.step_stats["loss_scale"] == 1024.0
    before = {name: value.clone() for name, value in accelerator.get_state_dict(model).items()}
    optimizer = accelerator._optimizers[0]
    loss = model(torch.randn(8, 16)).float().sum() * float("inf")  # every gradient inf/NaN
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    assert accelerator.optimizer_step_was_skipped
    assert accelerator.step_stats["loss_scale"] == 512.0 and accelerator.step_stats["skipped_steps"] == 1
    after = accelerator.get_state_dict(model)
    assert all(torch.equal(before[name], after[name]) for name in before)
    state = accelerator.precision.state_dict()
    assert "scaler" in (state if backend == "msamp" else state["loss_scaler"])  # checkpoints keep the scale


@pytest.mark.parametrize("backend", ["native", "ao", "te"])
def test_fp16_base_unscales_the_gradients_before_clipping(libraries: None, backend: str) -> None:
    """The norm clipping sees is the fp32 base's (FP8 gradients of the native backend included), not x scale."""
    norms = {}
    for base in ("fp32", "fp16"):
        accelerator = accelerator_for(backend, base_precision=base, scaling="current" if backend != "ao" else None)
        torch.manual_seed(0)
        model = Net()
        model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.0))
        torch.manual_seed(1)
        loss = nn.functional.mse_loss(model(torch.randn(8, 16)).float(), torch.randn(8, 16))
        accelerator.backward(loss)
        norms[base] = float(accelerator.clip_grad_norm_(model.parameters(), 1e9))
    assert norms["fp16"] == pytest.approx(norms["fp32"], rel=0.1)


def test_grad_scaler_kwargs_need_a_base_with_a_loss_scaler() -> None:
    with pytest.raises(ValueError, match="GradScalerKwargs.*base_precision='fp16'"):
        accelerator_for("native", GradScalerKwargs(), base_precision="bf16")


@pytest.mark.parametrize("backend", ["native", "ao", "te"])
def test_bf16_true_base_keeps_the_weights_in_bf16(libraries: None, fake_te: Any, backend: str) -> None:
    accelerator = accelerator_for(backend, base_precision="bf16-true")
    assert isinstance(accelerator.precision.base, BF16True) and accelerator.precision.param_dtype == torch.bfloat16
    model, _, losses = train_steps(accelerator)
    assert model.seen == {"input": torch.bfloat16, "plain_out": torch.bfloat16}
    assert {value.dtype for value in accelerator.get_state_dict(model).values()} == {torch.bfloat16}
    assert all(torch.isfinite(torch.tensor(losses)))
    if backend == "te":
        assert {c[1]["params_dtype"] for c in fake_te.state.calls if c[0] == "Linear"} == {torch.bfloat16}


@pytest.mark.parametrize("base", ["bf16-true", "16-true"])
def test_msamp_refuses_16_bit_weights_with_the_reason(libraries: None, base: str) -> None:
    with pytest.raises(ValueError, match=rf"base_precision='{base}'.*'msamp'.*fp32 model"):
        accelerator_for("msamp", base_precision=base)


def test_slow_bf16_warns_as_bf16_mixed_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accel_warnings, "_given", set())
    monkeypatch.setattr("accel.backends.amp.slow_dtype_reason", lambda device, dtype: f"no fast {dtype} here")
    with pytest.warns(PrecisionWarning, match=r"mixed_precision='fp8' will be slow here: no fast torch.bfloat16"):
        accelerator_for("native")
    with pytest.warns(PrecisionWarning, match=r"mixed_precision='bf16' will be slow here"):
        Accelerator(mixed_precision="bf16")


def test_fp32_base_does_not_warn(monkeypatch: pytest.MonkeyPatch, recwarn: pytest.WarningsRecorder) -> None:
    monkeypatch.setattr(accel_warnings, "_given", set())
    accelerator_for("native", base_precision="fp32")
    assert not [w for w in recwarn if issubclass(w.category, PrecisionWarning)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_unwrap_model_restores_the_models_own_forward(libraries: None, backend: str) -> None:
    accelerator = accelerator_for(backend)
    model, _, _ = train_steps(accelerator, steps=1)
    plain = accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    assert "forward" not in plain.__dict__


# ----------------------------------------------------------------------------- Lightning's and NeMo's names
def test_transformer_engine_is_te_with_bf16_weights(libraries: None, fake_te: Any) -> None:
    accelerator = Accelerator(mixed_precision="transformer-engine")
    precision = accelerator.precision
    assert accelerator.mixed_precision == "fp8" and precision.library == "te"
    assert precision.recipe.base_precision == "bf16-true" and precision.param_dtype == torch.bfloat16
    model = accelerator.prepare(Net())
    assert {c[1]["params_dtype"] for c in fake_te.state.calls if c[0] == "Linear"} == {torch.bfloat16}
    assert model(torch.randn(8, 16)).dtype == torch.bfloat16 and model.seen["input"] == torch.bfloat16


def test_transformer_engine_float16_keeps_the_other_fields_of_the_users_recipe(libraries: None) -> None:
    recipe = FP8RecipeKwargs(margin=2, exclude_modules=["plain"])
    precision = Accelerator(mixed_precision="transformer-engine-float16", kwarg_handlers=[recipe]).precision
    assert (precision.library, precision.recipe.base_precision, precision.recipe.margin) == ("te", "16-true", 2)
    assert precision.recipe.explicit_fields == {"margin", "exclude_modules", "backend", "base_precision"}


def test_nemo_names_set_the_base_and_keep_backend_auto() -> None:
    bf16 = Accelerator(mixed_precision="bf16_with_fp8_mixed").precision
    fp16 = Accelerator(mixed_precision="fp16_with_fp8_mixed").precision
    assert (bf16.library, bf16.recipe.base_precision, bf16.loss_scaler) == ("native", "bf16", None)
    assert (fp16.library, fp16.recipe.base_precision) == ("native", "fp16") and fp16.loss_scaler is not None


def test_a_name_that_contradicts_the_recipe_raises() -> None:
    with pytest.raises(ValueError, match=r"'transformer-engine' means .*backend='te'.*sets backend='native'"):
        Accelerator(mixed_precision="transformer-engine", kwarg_handlers=[FP8RecipeKwargs(backend="native")])


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a CUDA machine TransformerEngine may run")
def test_transformer_engine_on_this_cpu_says_what_the_name_means() -> None:
    with pytest.raises(RuntimeError, match=r"mixed_precision='transformer-engine' \(that is 'fp8' with "
                                           r"FP8RecipeKwargs\(backend='te', base_precision='bf16-true'\)\).*cannot run"):
        Accelerator(mixed_precision="transformer-engine")
