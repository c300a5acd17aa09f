"""fp16 and bf16 mixed precision on CPU, for real: autocast runs and fp16 scales the loss."""

from __future__ import annotations

import copy
import pickle
import warnings

import pytest
import torch
from torch import nn

from accel import Accelerator, AutocastKwargs, GradScalerKwargs
from accel import _warnings as _warnings_module
from accel._warnings import PrecisionWarning
from accel.backends import capability


def _record_linear_output_dtype(model: nn.Module) -> list[torch.dtype]:
    seen: list[torch.dtype] = []
    for module in model.modules():
        if isinstance(module, nn.Linear):
            module.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    return seen


@pytest.mark.parametrize(("name", "dtype"), [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_matmuls_run_in_16_bit_and_outputs_come_back_fp32(name: str, dtype: torch.dtype) -> None:
    accelerator = Accelerator(mixed_precision=name)
    model = accelerator.prepare(nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2)))
    seen = _record_linear_output_dtype(model)
    out = model(torch.randn(4, 8))
    assert seen == [dtype, dtype]
    assert out.dtype == torch.float32
    assert model[0].weight.dtype == torch.float32


def test_outputs_stay_16_bit_when_asked() -> None:
    accelerator = Accelerator(mixed_precision="fp16", kwarg_handlers=[AutocastKwargs(convert_outputs_to_fp32=False)])
    model = accelerator.prepare(nn.Linear(8, 2))
    assert model(torch.randn(4, 8)).dtype == torch.float16


def test_accelerator_autocast_covers_outside_code_and_can_be_disabled() -> None:
    accelerator = Accelerator(mixed_precision="fp16")
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with accelerator.autocast():
        assert (a @ b).dtype == torch.float16
        with accelerator.autocast(AutocastKwargs(enabled=False)):
            assert (a @ b).dtype == torch.float32
        assert (a @ b).dtype == torch.float16
    assert (a @ b).dtype == torch.float32


def test_fp16_backward_scales_the_loss() -> None:
    accelerator = Accelerator(mixed_precision="fp16", kwarg_handlers=[GradScalerKwargs(init_scale=1024)])
    model = accelerator.prepare(nn.Linear(4, 1, bias=False))
    x = torch.ones(1, 4)
    accelerator.backward(model(x).sum())
    assert torch.allclose(model.weight.grad, torch.full((1, 4), 1024.0))


def test_inf_gradient_skips_the_step_without_touching_parameters_or_lr() -> None:
    accelerator = Accelerator(mixed_precision="fp16", kwarg_handlers=[GradScalerKwargs(init_scale=256)])
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    before = [p.detach().clone() for p in model.parameters()]

    accelerator.backward(model(torch.randn(2, 4)).sum())
    model.weight.grad[0, 0] = float("inf")
    optimizer.step()
    scheduler.step()

    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert scheduler.get_last_lr() == [0.5]
    assert optimizer.step_was_skipped and accelerator.optimizer_step_was_skipped
    assert accelerator.step_stats == {"loss_scale": 128.0, "skipped_steps": 1}

    optimizer.zero_grad()
    accelerator.backward(model(torch.randn(2, 4)).sum())
    optimizer.step()
    scheduler.step()
    assert not accelerator.optimizer_step_was_skipped
    assert not torch.equal(before[0], model.weight)
    assert scheduler.get_last_lr() == [0.25]
    assert accelerator.step_stats == {"loss_scale": 128.0, "skipped_steps": 1}


def test_nan_gradient_is_skipped_too() -> None:
    accelerator = Accelerator(mixed_precision="fp16")
    model = nn.Linear(4, 1)
    model, optimizer = accelerator.prepare(model, torch.optim.Adam(model.parameters()))
    accelerator.backward(model(torch.randn(2, 4)).sum())
    model.bias.grad.fill_(float("nan"))
    optimizer.step()
    assert accelerator.optimizer_step_was_skipped
    assert optimizer.state_dict()["state"] == {}


def test_scale_grows_after_growth_interval() -> None:
    handler = GradScalerKwargs(init_scale=8, growth_interval=2)
    accelerator = Accelerator(mixed_precision="fp16", kwarg_handlers=[handler])
    model = nn.Linear(2, 1)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01))
    for _ in range(2):
        accelerator.backward(model(torch.randn(2, 2)).sum())
        optimizer.step()
        optimizer.zero_grad()
    assert accelerator.step_stats["loss_scale"] == 16.0 and not accelerator.optimizer_step_was_skipped


def test_disabled_scaler_still_autocasts() -> None:
    accelerator = Accelerator(mixed_precision="fp16", kwarg_handlers=[GradScalerKwargs(enabled=False)])
    model = accelerator.prepare(nn.Sequential(nn.Linear(4, 4)))
    seen = _record_linear_output_dtype(model)
    model(torch.randn(2, 4))
    assert seen == [torch.float16]
    assert accelerator.step_stats["loss_scale"] == 1.0


def test_scaler_state_round_trips() -> None:
    first = Accelerator(mixed_precision="fp16", kwarg_handlers=[GradScalerKwargs(init_scale=512)])
    first.precision.loss_scaler.skipped_steps = 3
    state = first.precision.state_dict()
    second = Accelerator(mixed_precision="fp16")
    second.precision.load_state_dict(state)
    assert second.step_stats == {"loss_scale": 512.0, "skipped_steps": 3}


def test_prepared_amp_model_pickles_and_deepcopies() -> None:
    accelerator = Accelerator(mixed_precision="bf16")
    model = accelerator.prepare(nn.Linear(4, 2))
    x = torch.randn(3, 4)
    for clone in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        assert torch.equal(clone(x), model(x))
        assert clone.forward.__wrapped__.__self__ is clone


def test_slow_16_bit_warns_once_and_still_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capability, "_cpu_has_fast_path", lambda dtype: False)
    monkeypatch.setattr(_warnings_module, "_given", set())
    with pytest.warns(PrecisionWarning, match="mixed_precision='bf16' will be slow here: this CPU has no native"):
        accelerator = Accelerator(mixed_precision="bf16")
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionWarning)
        Accelerator(mixed_precision="bf16")
    assert accelerator.mixed_precision == "bf16"


def test_fast_cpu_gives_no_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capability, "_cpu_has_fast_path", lambda dtype: True)
    monkeypatch.setattr(_warnings_module, "_given", set())
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionWarning)
        Accelerator(mixed_precision="bf16")


class _Outputs(nn.Module):
    """A model whose forward returns a structure of tensors of several dtypes."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> dict[str, object]:
        y = self.linear(x)  # 16-bit under autocast
        return {"logits": y, "pair": (y, y.argmax(-1)), "fp64": [x.double()], "fp32": x, "note": "kept"}


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_16_bit_outputs_in_a_structure_become_fp32_and_the_rest_is_returned_as_is(name: str) -> None:
    accelerator = Accelerator(mixed_precision=name)
    model = accelerator.prepare(_Outputs())
    x = torch.randn(3, 4)
    out = model(x)
    assert out["logits"].dtype == out["pair"][0].dtype == torch.float32
    assert out["pair"][1].dtype == torch.int64 and out["fp64"][0].dtype == torch.float64
    assert out["fp32"] is x and out["note"] == "kept"  # fp32 tensors are not copied
    assert torch.allclose(out["logits"], model.linear(x).float(), atol=1e-2)


def test_an_fp32_output_is_returned_as_it_is() -> None:
    accelerator = Accelerator(mixed_precision="bf16")
    model = accelerator.prepare(nn.Identity())
    x = torch.randn(3, 4)
    assert model(x) is x


def test_prepared_fp16_model_and_optimizer_pickle_after_training() -> None:
    """The loss scaler keeps weak references to the optimizers it watches; a copy starts watching afresh."""
    accelerator = Accelerator(mixed_precision="fp16")
    model = nn.Linear(4, 2)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    accelerator.backward(model(torch.randn(3, 4)).sum())
    optimizer.step()
    x = torch.randn(3, 4)
    clones = (pickle.loads(pickle.dumps((model, optimizer))), copy.deepcopy((model, optimizer)))
    for clone_model, clone_optimizer in clones:
        assert torch.equal(clone_model(x), model(x))
        assert clone_optimizer.state_dict()["param_groups"] == optimizer.state_dict()["param_groups"]
        assert clone_optimizer._backend.loss_scaler.state_dict() == accelerator.precision.loss_scaler.state_dict()
