"""O2's fused Adam step: the eager step's storage, with the same random bits, up to float operation order."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from accel.backends.native_fp8 import fused, fused_adam
from accel.backends.native_fp8.adam import AdamHyper, adam_step
from accel.backends.native_fp8.compact import CompactParameter, StepGradient
from accel.backends.native_fp8.grads import FP8Gradient
from accel.backends.native_fp8 import kernel_math, rounding
from accel.backends.native_fp8.kernel_math import stochastic_round
from accel.backends.native_fp8.rounding import random_low_bits, stochastic_truncate_
from tests.backends.native_fp8.tiny_training import train_tiny

pytestmark = pytest.mark.skipif(not fused.available(), reason=f"fused kernels: {fused.status()}")

ADAMW = AdamHyper(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01, decoupled=True, maximize=False)
ADAM_L2_MAXIMIZE = AdamHyper(lr=3e-3, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.1, decoupled=False, maximize=True)


def _warm_parameter(seed: int) -> tuple[CompactParameter, dict[str, Any]]:
    """A compact parameter after three eager steps (its O2 state exists)."""
    torch.manual_seed(seed)
    param = CompactParameter(torch.nn.Parameter(torch.randn(96, 130) * 0.05), torch.Generator().manual_seed(seed))
    state: dict[str, Any] = {}
    for _ in range(3):
        adam_step(param, state, torch.randn(96, 130) * 1e-3, ADAMW)
    return param, state


def _units_apart(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """How many representable values lie between two same-signed 8/16-bit float tensors, element-wise."""
    view = torch.uint8 if a.element_size() == 1 else torch.int16
    return (a.view(view).to(torch.int32) - b.view(view).to(torch.int32)).abs()


@pytest.mark.parametrize("hyper", [ADAMW, ADAM_L2_MAXIMIZE], ids=["adamw", "adam_l2_maximize"])
def test_one_step_stores_what_the_eager_step_stores(hyper: AdamHyper) -> None:
    param, state = _warm_parameter(0)
    grad = torch.randn(96, 130) * 1e-3
    eager, fast = copy.deepcopy((param, state)), copy.deepcopy((param, state))
    assert fused_adam.supports(fast[0], fast[1], grad)
    adam_step(eager[0], eager[1], grad.clone(), hyper)
    fused_adam.adam_step(fast[0], fast[1], StepGradient.of(grad.clone()), hyper)
    pairs = [
        (eager[0].param.data, fast[0].param.data),
        (eager[1]["exp_avg_sq_sqrt"], fast[1]["exp_avg_sq_sqrt"]),
        (eager[1]["exp_avg_ratio"], fast[1]["exp_avg_ratio"]),
    ]
    for want, got in pairs:
        assert got.dtype == want.dtype and got.shape == want.shape
        apart = _units_apart(want, got)
        assert apart.max() <= 1 and (apart > 0).float().mean() < 1e-3  # a rare rounding on the other side
    assert torch.equal(eager[0].storage.scale_inv, fast[0].storage.scale_inv)
    assert torch.equal(eager[1]["exp_avg_sq_sqrt_scale_inv"], fast[1]["exp_avg_sq_sqrt_scale_inv"])
    torch.testing.assert_close(eager[1]["exp_avg_ratio_scale_inv"], fast[1]["exp_avg_ratio_scale_inv"], rtol=1e-6, atol=0)
    assert eager[1]["step"].item() == fast[1]["step"].item() == 4.0
    # the same random bits were drawn: the generators stay in step
    assert torch.equal(eager[0].generator.get_state(), fast[0].generator.get_state())  # type: ignore[union-attr]


def test_an_fp8_gradient_read_in_the_kernel_is_its_float32_decoding() -> None:
    """The step reads the FP8 gradient store as it is; the result is that of its float32 decoding."""
    param, state = _warm_parameter(2)
    store = FP8Gradient(torch.device("cpu"))
    store.add(torch.randn(96, 130) * 1e-3)
    assert store.data is not None
    as_fp8 = StepGradient(store.data, store.scale_inv)
    decoded = StepGradient.of(as_fp8.real())
    results = []
    for grad in (as_fp8, decoded):
        copy_param, copy_state = copy.deepcopy((param, state))
        assert fused_adam.supports(copy_param, copy_state, grad.values)
        fused_adam.adam_step(copy_param, copy_state, grad, ADAMW)
        results.append((copy_param.param.data, copy_state["exp_avg_sq_sqrt"], copy_state["exp_avg_ratio"]))
    for a, b in zip(*results):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


@pytest.mark.parametrize("dropped", [13, 20])
def test_stochastic_rounding_is_the_eager_rounding_with_the_same_bits(dropped: int) -> None:
    torch.manual_seed(4)
    magnitudes = torch.exp2(torch.randint(-140, 100, (1 << 16,)).float())
    x = torch.cat((torch.randn(1 << 16) * magnitudes, torch.tensor([0.0, -0.0, 1e-45, -3e-39, 1.0, -65504.0])))
    noise = random_low_bits(x.numel(), dropped, torch.Generator().manual_seed(0), x.device).float()
    kernel = fused.compile_kernel(
        lambda values, bits: (stochastic_round(values, bits, dropped),), [torch.ones(16), noise[:16]]
    )
    (got,) = kernel(x, noise)
    want = stochastic_truncate_(x.clone(), dropped, torch.Generator().manual_seed(0))
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))


def test_rounding_up_and_down_in_proportion() -> None:
    """A value an eighth of the way between two float16 neighbours goes up an eighth of the time."""
    x = torch.full((1 << 16,), 1.0 + 2.0**-13)
    noise = random_low_bits(x.numel(), 13, torch.Generator().manual_seed(1), x.device).float()
    kernel = fused.compile_kernel(lambda values, bits: (stochastic_round(values, bits, 13),), [x[:16], noise[:16]])
    (got,) = kernel(x, noise)
    assert set(got.unique().tolist()) == {1.0, 1.0 + 2.0**-10}
    assert abs(got.mean().item() - (1.0 + 2.0**-13)) < 1e-5


def test_what_it_does_not_take() -> None:
    param, state = _warm_parameter(1)
    grad = torch.zeros(96, 130)
    assert fused_adam.supports(param, state, grad)
    assert not fused_adam.supports(param, {}, grad)  # no O2 state yet: the eager step creates it
    param.storage.materialise()  # real values in param.data (gradient clipping did this)
    assert not fused_adam.supports(param, state, grad)
    param.storage.restore()
    param.generator = None  # round to nearest
    assert not fused_adam.supports(param, state, grad)


def test_power_of_two_scale_is_the_eager_one() -> None:
    amax = torch.cat((
        torch.exp2(torch.arange(-149, 128, dtype=torch.float32)),  # exact powers of two, subnormals included
        torch.exp2(torch.arange(-149, 128, dtype=torch.float32)) * 1.5,
        torch.tensor([0.0, float("inf"), float("nan"), 3.4e38, 1e-45, 0.7, 65504.0]),
    ))
    kernel = fused.compile_kernel(lambda values: (kernel_math.pow2_scale(values),), [torch.ones(16)])
    (got,) = kernel(amax)  # element-wise here: each amax on its own
    want = torch.stack([rounding.pow2_scale(a) for a in amax])
    assert torch.equal(got, want)


def test_training_with_the_fused_step_follows_the_eager_step(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    fused_step = fused_adam.adam_step
    monkeypatch.setattr(fused_adam, "adam_step", lambda *args: calls.append(1) or fused_step(*args))
    fast = train_tiny("O2", 12)[0]
    assert len(calls) == 4 * 11  # weight and bias of both layers, every step after the first (it creates the state)
    monkeypatch.setattr(fused_adam, "supports", lambda *args: False)
    eager = train_tiny("O2", 12)[0]
    assert fast[-1] < 0.9 * fast[0]  # it learns
    torch.testing.assert_close(fast, eager, rtol=1e-4, atol=0)
