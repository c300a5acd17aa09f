"""O1's fused Adam(W) step: what materialise + torch's Adam + stochastic store gives, in one kernel."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from accel.backends.native_fp8 import fused, fused_o1_adam
from accel.backends.native_fp8.adam import AdamHyper
from accel.backends.native_fp8.compact import CompactParameter, StepGradient
from accel.backends.native_fp8.grads import FP8Gradient
from tests.backends.native_fp8.tiny_training import train_tiny

pytestmark = pytest.mark.skipif(not fused.available(), reason=f"fused kernels: {fused.status()}")

CASES = {
    "adamw": (torch.optim.AdamW, {"lr": 1e-3, "weight_decay": 0.01}),
    "adam_l2_maximize": (torch.optim.Adam, {"lr": 3e-3, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.1, "maximize": True}),
}


def _eager_step(param: CompactParameter, optimizer: torch.optim.Optimizer, grad: torch.Tensor) -> None:
    """The eager O1 step of one parameter: float32 copy, torch's own step, stochastic store."""
    param.materialise(grad)
    optimizer.step()
    param.finish_step(True)


def _pair(case: str) -> tuple[Any, Any, torch.Tensor]:
    """Two identical (compact parameter, optimizer) pairs after three eager steps, and a gradient."""
    kind, options = CASES[case]
    torch.manual_seed(0)
    param = CompactParameter(torch.nn.Parameter(torch.randn(96, 131) * 0.05), torch.Generator().manual_seed(0))
    optimizer = kind([param.param], **options)
    for _ in range(3):
        _eager_step(param, optimizer, torch.randn(96, 131) * 1e-3)
    return (param, optimizer), copy.deepcopy((param, optimizer)), torch.randn(96, 131) * 1e-3


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_step_is_the_eager_step(case: str) -> None:
    (eager, eager_opt), (fast, fast_opt), grad = _pair(case)
    _eager_step(eager, eager_opt, grad.clone())
    state = fast_opt.state[fast.param]
    assert fused_o1_adam.accepts(fast_opt) and fused_o1_adam.supports(fast, state, grad)
    hyper = AdamHyper.of(fast_opt.param_groups[0], isinstance(fast_opt, torch.optim.AdamW))
    fused_o1_adam.adam_step(fast, state, StepGradient.of(grad.clone()), hyper)
    want, got = eager.param.data, fast.param.data
    assert got.dtype == want.dtype == torch.float16
    differ = (want != got).float().mean().item()
    assert differ < 2e-3  # the same random bits: only a value at a rounding boundary may land on the other side
    assert torch.equal(eager.storage.scale_inv, fast.storage.scale_inv)
    eager_state = eager_opt.state[eager.param]
    assert sorted(state) == sorted(eager_state) == ["exp_avg", "exp_avg_sq", "step"]  # torch's keys and dtypes
    for key in ("exp_avg", "exp_avg_sq"):
        assert state[key].dtype == torch.float32
        # float operation order (inductor's lerp, torch's addcmul): a few ulps, where moments cancel
        scale = eager_state[key].abs().max().item()
        torch.testing.assert_close(state[key], eager_state[key], rtol=1e-5, atol=1e-6 * scale)
    assert state["step"].item() == eager_state["step"].item() == 4.0
    assert torch.equal(eager.generator.get_state(), fast.generator.get_state())  # type: ignore[union-attr]


def test_an_fp8_gradient_read_in_the_kernel_is_its_float32_decoding() -> None:
    (param, optimizer), _, grad = _pair("adamw")
    store = FP8Gradient(torch.device("cpu"))
    store.add(grad)
    assert store.data is not None
    as_fp8 = StepGradient(store.data, store.scale_inv)
    hyper = AdamHyper.of(optimizer.param_groups[0], True)
    results = []
    for step_grad in (as_fp8, StepGradient.of(as_fp8.real())):
        copy_param, copy_optimizer = copy.deepcopy((param, optimizer))
        state = copy_optimizer.state[copy_param.param]
        assert fused_o1_adam.supports(copy_param, state, step_grad.values)
        fused_o1_adam.adam_step(copy_param, state, step_grad, hyper)
        results.append((copy_param.param.data, state["exp_avg"], state["exp_avg_sq"]))
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_it_creates_torchs_state_on_the_first_step() -> None:
    param = CompactParameter(torch.nn.Parameter(torch.randn(8, 16)), torch.Generator().manual_seed(0))
    optimizer = torch.optim.AdamW([param.param], lr=1e-2)
    state = optimizer.state[param.param]
    hyper = AdamHyper.of(optimizer.param_groups[0], True)
    before = param.storage.value()
    fused_o1_adam.adam_step(param, state, StepGradient.of(torch.ones(8, 16)), hyper)
    assert state["step"].item() == 1.0 and state["step"].dtype == torch.float32 and state["step"].dim() == 0
    torch.testing.assert_close(state["exp_avg"], torch.full((8, 16), 0.1))
    # Adam's first step moves every weight by lr (times 1 - lr * wd decay) against the gradient's sign
    torch.testing.assert_close(param.storage.value(), before * (1 - 1e-2 * 1e-2) - 1e-2, rtol=0, atol=2e-3)


def test_what_it_does_not_take() -> None:
    param = CompactParameter(torch.nn.Parameter(torch.randn(4, 16)), torch.Generator().manual_seed(0))
    params = [param.param]
    assert fused_o1_adam.accepts(torch.optim.Adam(params))
    assert not fused_o1_adam.accepts(torch.optim.SGD(params, lr=0.1))
    assert not fused_o1_adam.accepts(torch.optim.AdamW(params, amsgrad=True))
    assert not fused_o1_adam.accepts(torch.optim.Adam(params, differentiable=True))

    class Custom(torch.optim.AdamW):
        def step(self, closure: Any = None) -> Any:  # a subclass may do anything in its step
            return super().step(closure)

    assert not fused_o1_adam.accepts(Custom(params))
    hooked = torch.optim.AdamW(params)
    handle = hooked.register_step_pre_hook(lambda optimizer, args, kwargs: None)  # it could read the gradients
    assert not fused_o1_adam.accepts(hooked)
    handle.remove()
    assert fused_o1_adam.accepts(hooked)

    grad = torch.zeros(4, 16)
    assert fused_o1_adam.supports(param, {}, grad)
    half_state = {"step": torch.tensor(1.0), "exp_avg": torch.zeros(4, 16, dtype=torch.float16), "exp_avg_sq": torch.zeros(4, 16)}
    assert not fused_o1_adam.supports(param, half_state, grad)  # not torch's float32 moments
    assert not fused_o1_adam.supports(param, {**half_state, "exp_avg": torch.zeros(4, 16), "step": 1}, grad)  # a number
    assert not fused_o1_adam.supports(param, {}, torch.zeros(16, 4).t())  # not contiguous
    param.generator = None  # round to nearest: the eager store
    assert not fused_o1_adam.supports(param, {}, grad)


@pytest.mark.parametrize("clip", [False, True], ids=["plain", "clipped"])
def test_training_through_the_accelerator_follows_the_eager_step(monkeypatch: pytest.MonkeyPatch, clip: bool) -> None:
    calls = []
    fused_step = fused_o1_adam.adam_step
    monkeypatch.setattr(fused_o1_adam, "adam_step", lambda *args: calls.append(1) or fused_step(*args))
    fast, optimizer = train_tiny("O1", 12, clip=clip)
    assert len(calls) == 4 * 12  # weight and bias of both layers, every step
    assert all(state["exp_avg"].dtype == torch.float32 for state in optimizer.state.values())
    monkeypatch.setattr(fused_o1_adam, "accepts", lambda optimizer: False)
    eager, _ = train_tiny("O1", 12, clip=clip)
    assert fast[-1] < 0.9 * fast[0]  # it learns
    torch.testing.assert_close(fast, eager, rtol=1e-4, atol=0)


def test_other_optimizers_take_the_eager_path(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(fused_o1_adam, "adam_step", lambda *args: calls.append(1))
    losses, _ = train_tiny("O1", 4, torch.optim.SGD)
    assert not calls and losses[-1] < losses[0]
