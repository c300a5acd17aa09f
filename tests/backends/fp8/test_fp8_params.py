"""FP8RecipeKwargs(fp8_params=True): te builds its modules under TE's model-init context (stand-in, both
API generations) with masters in the optimizer; ao and msamp refuse it with the reason."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from accel import Accelerator, FP8RecipeKwargs


def make() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))


def te_fp8_params(**recipe: Any) -> Accelerator:
    recipe.setdefault("base_precision", "fp32")
    return Accelerator(mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(backend="te", fp8_params=True, **recipe)])


def on_e4m3_grid(weight: torch.Tensor) -> bool:
    """Whether `weight` holds only values E4M3 can represent with one per-tensor scale (up to fp32 rounding)."""
    scaled = weight * (448.0 / weight.abs().max())
    return torch.allclose(scaled.to(torch.float8_e4m3fn).float(), scaled, rtol=1e-5, atol=0)


@pytest.mark.parametrize(("generation", "api"), [("autocast", "quantized_model_init"), ("fp8_autocast", "fp8_model_init")])
@pytest.mark.parametrize("optimizer_first", [False, True])
def test_te_builds_fp8_weights_and_the_optimizer_steps_masters(
    fake_te: Any, fp8_gpu: Any, generation: str, api: str, optimizer_first: bool
) -> None:
    fake_te.install(generation)
    accelerator = te_fp8_params()
    assert accelerator.precision.master_weights.api == api
    model = make()
    masters = [model[0].weight, model[2].weight]
    originals = [m.detach().clone() for m in masters]
    if optimizer_first:
        model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    else:
        model = accelerator.prepare(model)
        optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1))  # built on the TE modules
    inits = [c for c in fake_te.state.calls if c[0] in ("quantized_model_init", "fp8_model_init")]
    assert [c[0] for c in inits] == [api, api] and all(c[1]["recipe"] is accelerator.precision.te_recipe for c in inits)
    assert all(on_e4m3_grid(model[i].weight.detach()) for i in (0, 2))
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert {id(m) for m in masters} <= held and not {id(model[i].weight) for i in (0, 2)} & held
    assert all(torch.equal(m, o) for m, o in zip(masters, originals))  # masters keep full precision
    x = torch.randn(8, 16)
    loss = model(x).pow(2).mean()
    accelerator.backward(loss)
    accelerator.clip_grad_norm_(model.parameters(), 1e9)
    assert all(m.grad is not None for m in masters) and model[0].weight.grad is None
    optimizer.step()
    optimizer.zero_grad()
    assert not any(torch.equal(m, o) for m, o in zip(masters, originals))
    for i, master in zip((0, 2), masters):  # the FP8 weight is the master quantized anew
        assert on_e4m3_grid(model[i].weight.detach())
        assert torch.allclose(model[i].weight.detach(), master.detach(), rtol=0.07, atol=1e-3)
    saved = accelerator.get_state_dict(model)
    assert torch.equal(saved["0.weight"], masters[0].detach()) and torch.equal(saved["2.weight"], masters[1].detach())


def test_te_loading_a_state_dict_sets_the_masters_exactly(fake_te: Any, fp8_gpu: Any) -> None:
    fake_te.install()
    accelerator = te_fp8_params()
    model = make()
    master = model[0].weight
    model = accelerator.prepare(model)
    values = {k: torch.full_like(v, 0.1234567) for k, v in accelerator.get_state_dict(model).items()}
    model.load_state_dict(values, strict=False)
    assert torch.equal(master.detach(), values["0.weight"])


def test_te_small_updates_accumulate_in_the_master(fake_te: Any, fp8_gpu: Any) -> None:
    """Updates far below FP8's resolution still move the weight: they add up in the master."""
    fake_te.install()
    accelerator = te_fp8_params()
    model = make()
    master = model[0].weight
    before = master.detach().clone()
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=1e-5))
    for _ in range(3):
        accelerator.backward(model(torch.randn(8, 16)).sum())
        optimizer.step()
        optimizer.zero_grad()
    assert (master.detach() - before).abs().max() > 0


@pytest.mark.parametrize(("backend", "reason"), [
    ("ao", "torchao's float8 training keeps the weights in high precision"),
    ("msamp", "MS-AMP stores weights in FP8 only at its O3 level"),
])
def test_ao_and_msamp_refuse_fp8_params_with_the_reason(
    fake_msamp: Any, fp8_gpu: Any, backend: str, reason: str
) -> None:
    fake_msamp.install()
    recipe = FP8RecipeKwargs(backend=backend, fp8_params=True, use_autocast_during_eval=backend == "msamp")
    with pytest.raises(ValueError, match=rf"fp8_params=True\) cannot run on the '{backend}' FP8 backend: {reason}"):
        Accelerator(mixed_precision="fp8", kwarg_handlers=[recipe])


@pytest.mark.parametrize("backend", ["ao", "msamp"])
def test_fp8_params_false_given_explicitly_is_fine_everywhere(fake_msamp: Any, fp8_gpu: Any, backend: str) -> None:
    fake_msamp.install()
    recipe = FP8RecipeKwargs(backend=backend, fp8_params=False, use_autocast_during_eval=backend == "msamp")
    assert Accelerator(mixed_precision="fp8", kwarg_handlers=[recipe]).precision.library == backend
