"""The small-layer filter: one rule (accel.backends.fp8.small_layers) applied by every FP8 backend,
each skipped layer in the conversion report with its reason, switchable by FP8RecipeKwargs(small_layer_dim=...)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from accel import Accelerator, FP8RecipeKwargs
from accel.backends.conversion import SMALL, plan_conversion
from accel.backends.fp8.small_layers import SmallLayerRule, small_layer_rule

CUDA, CPU = torch.device("cuda"), torch.device("cpu")
LLAMA3_8B = {"wq": (4096, 4096), "wk": (4096, 1024), "wv": (4096, 1024), "wo": (4096, 4096),
             "w1": (4096, 14336), "w3": (4096, 14336), "w2": (14336, 4096)}
"""One Llama-3-8B block's Linear layers: name -> (in_features K, out_features N)."""


def llama_block() -> nn.Module:
    """LLAMA3_8B's layers on the meta device (no memory): the rule reads shapes only."""
    return nn.ModuleDict({name: nn.Linear(k, n, bias=False, device="meta") for name, (k, n) in LLAMA3_8B.items()})


def model() -> nn.Module:
    """Widths 32 and 64: with small_layer_dim=32, the 32 -> 64 and 64 -> 32 layers stay out, 64 -> 64 converts."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 32))


# ----------------------------------------------------------------------------- the rule
def test_defaults_per_scaling_on_a_gpu_and_off_on_the_cpu() -> None:
    assert small_layer_rule(None, "delayed", CUDA).limit == 1024
    assert small_layer_rule(None, "current", CUDA).limit == 1024
    assert small_layer_rule(None, "rowwise", CUDA).limit == 2048
    assert small_layer_rule(None, "rowwise_with_gw_hp", CUDA).limit == 2048
    assert small_layer_rule(None, "a later scaling", CUDA).limit == 1024  # the per-tensor limit
    off = small_layer_rule(None, "delayed", CPU)
    assert off.limit == 0 and "emulated" in off.describe() and not off.reason(16, 16)
    assert small_layer_rule(0, "rowwise", CUDA).limit == 0  # set explicitly: wins everywhere
    assert small_layer_rule(64, "delayed", CPU).limit == 64


def test_the_limit_is_on_the_smaller_width_and_inclusive() -> None:
    rule = SmallLayerRule(1024, "test")
    assert rule.reason(1024, 8192).startswith("K=1024, N=8192: min(K, N) = 1024 <= small_layer_dim 1024")
    assert "small_layer_dim=0 converts it" in rule.reason(8192, 64)
    assert rule.reason(1040, 1040) == ""


@pytest.mark.parametrize(("scaling", "recipe"), [("current", "tensorwise"), ("rowwise", "rowwise")])
def test_on_llama3_8b_the_rule_keeps_out_what_torchaos_auto_filter_keeps_out(scaling: str, recipe: str) -> None:
    """Same choice as torchao's _auto_filter_for_recipe (H100 tables) on a Llama-3-8B block: wk and wv stay out."""
    float8 = pytest.importorskip("torchao.float8", reason="torchao is not installed")
    block = llama_block()
    report = plan_conversion(block, is_converted=lambda m: False, small_layers=small_layer_rule(None, scaling, CUDA))
    torchao_filter = float8._auto_filter_for_recipe(recipe, filter_fqns=[])
    torchao_keeps = {name for name, layer in block.items() if torchao_filter(layer, name)}
    assert {d.name for d in report.converted} == torchao_keeps == {"wq", "wo", "w1", "w3", "w2"}
    assert {d.name: d.category for d in report.skipped} == {"wk": SMALL, "wv": SMALL}
    assert "skipped: 2 small" in report.summary()
    assert f"small-layer filter: min(K, N) <= {2048 if scaling == 'rowwise' else 1024}" in report.summary()


# ----------------------------------------------------------------------------- the recipe field
def test_the_field_is_checked_and_is_a_setting_like_every_field() -> None:
    from accel.settings import FP8_SETTINGS_BY_KEY
    from accel.settings.handlers import fp8_recipe_from_env

    assert FP8RecipeKwargs().small_layer_dim is None
    for bad in (-1, "1024", 1.5, True):
        with pytest.raises((TypeError, ValueError), match="small_layer_dim"):
            FP8RecipeKwargs(small_layer_dim=bad)
    setting = FP8_SETTINGS_BY_KEY["small_layer_dim"]
    assert (setting.flags[0], setting.env_var, setting.yaml_path) == (
        "--fp8_small_layer_dim", "ACCEL_FP8_SMALL_LAYER_DIM", "fp8_config.small_layer_dim")
    recipe = fp8_recipe_from_env({"ACCEL_FP8_SMALL_LAYER_DIM": "0"})
    assert recipe is not None and recipe.small_layer_dim == 0 and "small_layer_dim" in recipe.explicit_fields


# ----------------------------------------------------------------------------- every backend applies it
def _accelerator(backend: str, **recipe: Any) -> Accelerator:
    recipe.setdefault("base_precision", "fp32")
    return Accelerator(mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(backend=backend, **recipe)])


def _check_report(accelerator: Accelerator, model: nn.Module) -> None:
    report = accelerator.precision.conversion_report
    assert [d.category for d in report.layers] == [SMALL, "converted", SMALL]
    assert report.layers[0].reason.startswith("K=32, N=64: min(K, N) = 32 <= small_layer_dim 32")
    assert "skipped: 2 small" in report.summary() and "(as set by small_layer_dim)" in report.summary()
    assert type(model[0]) is nn.Linear and type(model[4]) is nn.Linear and type(model[2]) is not nn.Linear


def test_native_keeps_small_layers_in_the_base_precision_and_trains() -> None:
    accelerator = _accelerator("native", small_layer_dim=32)
    net = model()
    prepared, optimizer = accelerator.prepare(net, torch.optim.AdamW(net.parameters()))
    _check_report(accelerator, prepared)
    loss = prepared(torch.randn(16, 32)).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    assert prepared[0].weight.grad is not None  # the high-precision layer trains beside the FP8 one


def test_ao_applies_the_same_rule() -> None:
    pytest.importorskip("torchao.float8", reason="torchao is not installed")
    accelerator = _accelerator("ao", small_layer_dim=32)
    prepared = accelerator.prepare(model())
    _check_report(accelerator, prepared)
    assert type(prepared[2]).__name__ == "Float8Linear"


def test_te_applies_the_same_rule(fake_te: Any, fp8_gpu: Any) -> None:
    fake_te.install()
    accelerator = _accelerator("te", small_layer_dim=32)
    _check_report(accelerator, accelerator.prepare(model()))


def test_msamp_applies_the_same_rule(fake_msamp: Any, fp8_gpu: Any) -> None:
    fake_msamp.install()
    accelerator = _accelerator("msamp", small_layer_dim=32, use_autocast_during_eval=True)
    net = model()
    prepared, _ = accelerator.prepare(net, torch.optim.Adam(net.parameters()))
    report = accelerator.precision.conversion_report
    assert [d.category for d in report.layers] == [SMALL, "converted", SMALL]
    assert [n for n, m in prepared.named_modules() if type(m).__module__ == "msamp.nn"] == ["2"]


def test_the_cpu_default_converts_everything_and_says_the_filter_is_off() -> None:
    accelerator = _accelerator("native")
    accelerator.prepare(model())
    report = accelerator.precision.conversion_report
    assert len(report.converted) == 3 and "small" not in report.summary()
    assert "small-layer filter off (the default on cpu" in report.details()


def test_a_model_with_only_small_layers_raises_naming_the_switch() -> None:
    with pytest.raises(ValueError, match=r"too small to gain: set FP8RecipeKwargs\(small_layer_dim=0\)"):
        _accelerator("native", small_layer_dim=64).prepare(model())
