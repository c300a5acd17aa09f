"""The `msamp` backend against the stand-in MS-AMP: initialize once both are prepared, loss scaling."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from accel import Accelerator, FP8RecipeKwargs, GradScalerKwargs
from accel.backends.fp8.msamp import MSAMPFP8
from accel.kwargs_handlers import KwargsHandler


def msamp_accelerator(*handlers: KwargsHandler, **recipe: Any) -> Accelerator:
    recipe.setdefault("use_autocast_during_eval", True)
    recipe.setdefault("base_precision", "fp32")  # the stand-in computes in fp32; base-precision tests say otherwise
    return Accelerator(mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(backend="msamp", **recipe), *handlers])


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16), nn.Linear(16, 3))


@pytest.fixture
def msamp(fake_msamp: Any, fp8_gpu: Any) -> Any:
    fake_msamp.install()
    return fake_msamp


def fp8_linear_names(model: nn.Module) -> list[str]:
    return [name for name, m in model.named_modules() if type(m).__module__ == "msamp.nn"]


@pytest.mark.parametrize("level", ["O1", "O2"])
def test_model_and_optimizer_in_one_call_are_initialized_once(msamp: Any, level: Any) -> None:
    accelerator = msamp_accelerator(optimization_level=level)
    model = make_model()
    raw = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, raw)
    (name, kwargs), = msamp.calls
    assert kwargs["model"] is model and kwargs["optimizer"] is raw and kwargs["opt_level"] == level
    assert type(optimizer.optimizer).__name__ == "LBAdam"  # what MS-AMP builds for AdamW since torch 2.6 ...
    assert optimizer.optimizer.use_adam is False  # ... with AdamW's decoupled weight decay restored
    assert fp8_linear_names(model) == ["0", "2"]
    assert {id(p) for g in optimizer.param_groups for p in g["params"]} == {id(p) for p in model.parameters()}


@pytest.mark.parametrize("model_first", [True, False])
def test_model_and_optimizer_in_separate_calls_in_either_order(msamp: Any, model_first: Any) -> None:
    accelerator = msamp_accelerator()
    model = make_model()
    raw = torch.optim.Adam(model.parameters())
    if model_first:
        model = accelerator.prepare(model)
        assert msamp.calls == []
        optimizer = accelerator.prepare(raw)
    else:
        optimizer = accelerator.prepare(raw)
        assert msamp.calls == []
        model = accelerator.prepare(model)
    assert len(msamp.calls) == 1 and type(optimizer.optimizer).__name__ == "LBAdam"
    assert optimizer.optimizer.use_adam is True
    model(torch.randn(4, 16))


def test_forward_before_the_optimizer_is_prepared_refuses(msamp: Any) -> None:
    model = msamp_accelerator().prepare(make_model())
    with pytest.raises(RuntimeError, match="MS-AMP converts a model together with its torch.optim.Adam/AdamW"):
        model(torch.randn(4, 16))


def test_training_steps_through_the_new_optimizer_with_loss_scaling(msamp: Any) -> None:
    accelerator = msamp_accelerator(GradScalerKwargs(init_scale=256.0))
    model = make_model()
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-2))
    x, y = torch.randn(32, 16), torch.randn(32, 3)
    losses = []
    for _ in range(5):
        loss = nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert accelerator.step_stats == {"loss_scale": 256.0, "skipped_steps": 0}


def test_a_step_with_inf_gradients_is_skipped_and_the_scale_lowered(msamp: Any) -> None:
    accelerator = msamp_accelerator()
    model = make_model()
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters()))
    before = accelerator.get_state_dict(model)  # MS-AMP's FP8 weights are ScalingParameters, not Tensors
    accelerator.backward(model(torch.full((4, 16), float("inf"))).sum())
    optimizer.step()
    assert accelerator.optimizer_step_was_skipped
    after = accelerator.get_state_dict(model)
    assert all(torch.equal(before[name], after[name]) for name in before)
    assert accelerator.step_stats == {"loss_scale": 32768.0, "skipped_steps": 1}


def test_scheduler_changes_reach_the_optimizer_msamp_built(msamp: Any) -> None:
    accelerator = msamp_accelerator()
    model = make_model()
    raw = torch.optim.AdamW(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(raw, step_size=1, gamma=0.5)
    model, optimizer, scheduler = accelerator.prepare(model, raw, scheduler)
    accelerator.backward(model(torch.randn(4, 16)).square().mean())
    optimizer.step()
    scheduler.step()
    assert optimizer.optimizer is not raw and optimizer.optimizer.param_groups[0]["lr"] == 0.5


def test_exclude_modules_keep_layers_in_high_precision(msamp: Any) -> None:
    accelerator = msamp_accelerator(exclude_modules=("2",))
    model = make_model()
    model, _ = accelerator.prepare(model, torch.optim.Adam(model.parameters()))
    assert fp8_linear_names(model) == ["0"]
    assert not hasattr(model[2], "use_fp32_linear") and not hasattr(model[3], "use_fp32_linear")
    report = accelerator.precision.conversion_report
    assert [d.category for d in report.layers] == ["converted", "excluded", "not a multiple of 16"]


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("optimizer", [torch.optim.SGD, torch.optim.RMSprop])
def test_a_non_adam_optimizer_raises_at_prepare_naming_native(msamp: Any, optimizer: Any) -> None:
    accelerator = msamp_accelerator()
    model = make_model()
    with pytest.raises(ValueError, match=r"accepts only torch.optim.Adam and torch.optim.AdamW.*"
                                         r"backend='native' runs FP8 on any device, with any optimizer at"):
        accelerator.prepare(model, optimizer(model.parameters(), lr=0.1))
    assert msamp.calls == []


def test_an_adam_subclass_and_amsgrad_raise(msamp: Any) -> None:
    class MyAdam(torch.optim.Adam):
        pass

    model = make_model()
    with pytest.raises(ValueError, match="not subclasses"):
        msamp_accelerator().prepare(MyAdam(model.parameters()))
    with pytest.raises(ValueError, match="amsgrad=True"):
        msamp_accelerator().prepare(torch.optim.AdamW(model.parameters(), amsgrad=True))


def test_optimizer_with_parameters_of_another_model_raises(msamp: Any) -> None:
    accelerator = msamp_accelerator()
    with pytest.raises(ValueError, match="do not belong to the prepared model"):
        accelerator.prepare(make_model(), torch.optim.Adam(make_model().parameters()))


def test_a_second_model_raises(msamp: Any) -> None:
    accelerator = msamp_accelerator()
    accelerator.prepare(make_model())
    with pytest.raises(NotImplementedError, match="runs one model"):
        accelerator.prepare(make_model())


@pytest.mark.parametrize(("field", "message"), [
    ({"margin": 1}, r"FP8RecipeKwargs\(margin=1\) cannot run on the 'msamp' FP8 backend: it always runs margin=0"),
    ({"fp8_format": "E4M3"}, "it always runs fp8_format='HYBRID'"),
    ({"use_autocast_during_eval": False}, "it always runs use_autocast_during_eval=True"),
    ({"amax_history_len": 16}, "sets amax_history_len, which the 'msamp' FP8 backend cannot honour"),
    ({"scaling": "current"}, "scaling='current'.*'msamp'"),
])
def test_recipe_fields_msamp_cannot_honour_raise(msamp: Any, field: Any, message: Any) -> None:
    with pytest.raises(ValueError, match=message):
        msamp_accelerator(**field)


def test_fields_msamp_runs_are_accepted_when_set_explicitly(msamp: Any) -> None:
    accelerator = msamp_accelerator(fp8_format="HYBRID", margin=0, amax_compute_algo="max", optimization_level="O2")
    assert accelerator.precision.scaling == "delayed"


def test_default_eval_setting_is_reported_since_msamp_runs_fp8_in_eval(msamp: Any) -> None:
    from accel import _warnings

    _warnings._given.clear()
    with pytest.warns(UserWarning, match="backend='msamp' runs FP8 in eval mode too"):
        Accelerator(mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(backend="msamp")])


def test_msamp_without_cuda_raises_with_the_reasons() -> None:
    with pytest.raises(RuntimeError) as error:
        msamp_accelerator()
    assert "the device is cpu, not a CUDA GPU with FP8" in str(error.value)
    assert "MS-AMP is not installed (it is not on PyPI" in str(error.value)


def test_availability_with_msamp_installed(fake_msamp: Any) -> None:
    fake_msamp.install(version="0.2.0")
    reason = MSAMPFP8.availability(torch.device("cpu"))
    assert reason == "the device is cpu, not a CUDA GPU with FP8 (compute capability >= 8.9)"


def test_availability_with_an_old_msamp(fake_msamp: Any, fp8_gpu: Any) -> None:
    fake_msamp.install(version="0.2.0")
    assert MSAMPFP8.availability(torch.device("cpu")).startswith("MS-AMP 0.2.0 is installed, accel needs 0.3 or newer")
    fake_msamp.install(version="0.4.0")
    assert MSAMPFP8.availability(torch.device("cpu")) is None


def test_a_second_optimizer_raises(msamp: Any) -> None:
    accelerator = msamp_accelerator()
    model = make_model()
    with pytest.raises(NotImplementedError, match="runs one optimizer, 2 were prepared"):
        accelerator.prepare(model, torch.optim.Adam(model[0].parameters()), torch.optim.Adam(model[2].parameters()))
    accelerator = msamp_accelerator()
    model = make_model()
    accelerator.prepare(model, torch.optim.Adam(model.parameters()))
    tensors = [p for p in model.parameters() if isinstance(p, torch.Tensor)]  # torch refuses ScalingParameters
    with pytest.raises(NotImplementedError, match="has already converted the model with its optimizer"):
        accelerator.prepare(torch.optim.Adam(tensors))


# ----------------------------------------------------------------------------- MS-AMP's ScalingParameters
def test_fp8_weights_are_scaling_parameters_and_a_loss_scaled_step_unscales_them(msamp: Any) -> None:
    """torch's GradScaler asserts on MS-AMP's non-Tensor weights (`expected param to be torch.Tensor`);
    accel unscales those as MS-AMP does, and the step matches one without loss scaling."""
    results = {}
    for init_scale in (1.0, 4096.0):
        accelerator = msamp_accelerator(GradScalerKwargs(init_scale=init_scale))
        model = make_model()
        model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-2))
        weight = model[0]._parameters["weight"]
        assert not isinstance(weight, torch.Tensor) and type(weight).__name__ == "ScalingParameter"
        torch.manual_seed(1)
        accelerator.backward(nn.functional.mse_loss(model(torch.randn(8, 16)), torch.randn(8, 3)))
        accelerator.unscale_gradients()
        results[init_scale] = (weight.grad.float().clone(), model[0].bias.grad.clone())
        optimizer.step()
        assert not accelerator.optimizer_step_was_skipped
    for unscaled, scaled in zip(results[1.0], results[4096.0]):
        torch.testing.assert_close(scaled, unscaled, rtol=0.07, atol=1e-6)  # FP8 gradients: E4M3 rounding


def test_an_inf_in_an_fp8_weight_gradient_skips_the_step(msamp: Any) -> None:
    accelerator = msamp_accelerator()
    model = make_model()
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters()))
    before = accelerator.get_state_dict(model)
    accelerator.backward(model(torch.randn(4, 16)).sum())
    model[0]._parameters["weight"].grad.meta.amax.fill_(float("inf"))  # only the FP8 gradient overflowed
    optimizer.step()
    assert accelerator.optimizer_step_was_skipped and accelerator.step_stats["skipped_steps"] == 1
    after = accelerator.get_state_dict(model)
    assert all(torch.equal(before[name], after[name]) for name in before)


def test_clipping_uses_ms_amps_clip_grad_norm(msamp: Any) -> None:
    accelerator = msamp_accelerator()
    model = make_model()
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters()))
    accelerator.backward(model(torch.randn(4, 16)).sum())
    accelerator.unscale_gradients()
    grads = [p.grad.float() if not isinstance(p, torch.Tensor) else p.grad for p in model.parameters()]
    expected = torch.norm(torch.stack([g.norm() for g in grads]))
    norm = accelerator.precision.clip_grad_norm_(model.parameters(), 1e-3)
    torch.testing.assert_close(norm, expected)
    clipped = [p.grad.float() if not isinstance(p, torch.Tensor) else p.grad for p in model.parameters()]
    torch.testing.assert_close(torch.norm(torch.stack([g.norm() for g in clipped])), torch.tensor(1e-3), rtol=1e-3, atol=0)


@pytest.mark.parametrize(("level", "exp_avg_sq"), [("O1", torch.float32), ("O2", torch.float16)])
def test_initialize_builds_the_optimizer_state_dtypes_of_its_level(msamp: Any, level: str, exp_avg_sq: Any) -> None:
    accelerator = msamp_accelerator(optimization_level=level)
    model = make_model()
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters()))
    assert optimizer.optimizer.exp_avg_sq_dtype == exp_avg_sq
    assert optimizer.optimizer.exp_avg_dtype == (torch.uint8 if level == "O2" else torch.float32)
    accelerator.backward(model(torch.randn(8, 16)).sum())
    optimizer.step()
    state = optimizer.optimizer.state[model[0].weight]
    assert state["exp_avg_sq"].dtype == exp_avg_sq  # the state the level asks for, as MS-AMP builds it


def test_initialize_names_its_fp8_weights_and_has_ddp_ignore_them(msamp: Any) -> None:
    """As LinearReplacer.replace does: MS-AMP's optimizer all-reduces those gradients, not DDP."""
    accelerator = msamp_accelerator()
    model = make_model()
    model, _ = accelerator.prepare(model, torch.optim.AdamW(model.parameters()))
    assert model[0].weight._param_name == "0.weight"
    assert {"0.weight", "2.weight"} <= set(model._ddp_params_and_buffers_to_ignore)


def test_ms_amps_layers_go_to_the_training_device(fake_msamp: Any, fp8_gpu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """MS-AMP's LinearReplacer calls `.cuda()`, which means torch's *current* CUDA device: accel makes it the
    training device while msamp.initialize runs."""
    import contextlib

    from accel.backends.fp8.msamp import MSAMPFP8
    from accel.kwargs_handlers.handlers import Handlers

    fake_msamp.install()

    @contextlib.contextmanager
    def current(device: Any) -> Any:
        previous, fake_msamp.current_device = fake_msamp.current_device, torch.device(device)
        try:
            yield
        finally:
            fake_msamp.current_device = previous

    monkeypatch.setattr(torch.cuda, "device", current)
    recipe = FP8RecipeKwargs(backend="msamp", base_precision="fp32", use_autocast_during_eval=True, small_layer_dim=0)
    with pytest.warns(UserWarning, match="CUDA is not available"):  # torch's GradScaler on this CPU-only torch
        backend = MSAMPFP8(torch.device("cuda", 1), Handlers({FP8RecipeKwargs: recipe}))
    model = backend.convert_module(make_model())
    wrapped = type("Wrapped", (), {"optimizer": torch.optim.AdamW(model.parameters())})()
    backend.after_prepare([model], [wrapped])
    assert fake_msamp.calls[-1][1]["current_device"] == torch.device("cuda", 1)


def test_building_the_backend_says_ms_amp_is_unmaintained_and_what_to_use(msamp: Any, monkeypatch: Any) -> None:
    """As Accelerate warns (a FutureWarning) when it prepares with MS-AMP; accel names the replacements."""
    import accel._warnings

    monkeypatch.setattr(accel._warnings, "_given", set())
    with pytest.warns(FutureWarning, match=r"backend='msamp': MS-AMP is unmaintained upstream \(no commits since "
                                           r"December 2025.*backend='native' runs MS-AMP's recipe"):
        msamp_accelerator(use_autocast_during_eval=True)
