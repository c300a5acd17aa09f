"""Every FP8RecipeKwargs scaling on the `te` backend -> TransformerEngine's recipe, with the fields TE has at
each release (stand-in from TE's source), backward_override, and the refusals at construction."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch import nn

from accel import Accelerator, FP8RecipeKwargs
from accel.backends.fp8.te_api import TEApi, TEAutocast
from accel.backends.fp8.te_recipe import _capability_reason

LATEST = "2.18.0"


def te_accelerator(**recipe: object) -> Accelerator:
    recipe.setdefault("base_precision", "fp32")
    return Accelerator(mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(backend="te", **recipe)])


def recipe_calls(fake_te: Any) -> list[tuple[str, dict[str, Any]]]:
    """(class name, keywords with enum members by name) of every TE recipe accel built."""
    return [(name, {k: getattr(v, "name", v) for k, v in kwargs.items()})
            for name, kwargs in fake_te.state.calls if name.endswith("Scaling")]


def blackwell(fake_te: Any, version: str = LATEST) -> None:
    """A TE whose probes say this GPU runs every recipe (a B200)."""
    probes = ("is_fp8_available", "is_mxfp8_available", "is_fp8_block_scaling_available", "is_nvfp4_available")
    fake_te.install(version=version, probes={probe: (True, "") for probe in probes})


@pytest.mark.parametrize(("scaling", "expected"), [
    ("delayed", ("DelayedScaling", {"fp8_format": "HYBRID", "margin": 0, "amax_history_len": 1024,
                                    "amax_compute_algo": "max"})),
    ("current", ("Float8CurrentScaling", {"fp8_format": "HYBRID"})),
    ("mxfp8", ("MXFP8BlockScaling", {"fp8_format": "HYBRID"})),
    ("block", ("Float8BlockScaling", {"fp8_format": "HYBRID"})),
    ("nvfp4", ("NVFP4BlockScaling", {})),
])
def test_each_scaling_builds_its_te_recipe_with_exactly_the_checked_fields(
    fake_te: Any, fp8_gpu: Any, scaling: str, expected: Any
) -> None:
    blackwell(fake_te)
    accelerator = te_accelerator(scaling=scaling)
    assert recipe_calls(fake_te) == [expected]
    assert type(accelerator.precision.te_recipe).__name__ == expected[0]
    assert f"te, {scaling} scaling" in accelerator.precision.describe()


def test_nvfp4_keeps_tes_e4m3_block_scales_and_refuses_another_format(fake_te: Any, fp8_gpu: Any) -> None:
    blackwell(fake_te)
    recipe = te_accelerator(scaling="nvfp4", fp8_format="E4M3").precision.te_recipe
    assert (recipe.fp4_format.name, recipe.fp8_format.name) == ("E2M1", "E4M3")
    with pytest.raises(ValueError, match=r"fp8_format='HYBRID'\) cannot run on the 'te' FP8 backend: it always runs "
                                         r"fp8_format='E4M3' \(TransformerEngine's nvfp4 recipe"):
        te_accelerator(scaling="nvfp4", fp8_format="HYBRID")


@pytest.mark.parametrize(("version", "scaling", "added"), [
    ("2.7.0", "nvfp4", "NVFP4BlockScaling.*added in 2.8"),
    ("2.2.0", "block", "Float8BlockScaling.*added in 2.3"),
    ("2.1.0", "current", "Float8CurrentScaling.*added in 2.2"),
])
def test_a_recipe_older_te_lacks_is_refused_naming_the_release(
    fake_te: Any, fp8_gpu: Any, version: str, scaling: str, added: str
) -> None:
    fake_te.install(generation="fp8_autocast", version=version, probes={"is_fp8_available": (True, "")})
    with pytest.raises(ValueError, match=f"scaling='{scaling}'.*{added}"):
        te_accelerator(scaling=scaling)


def test_nvfp4_on_hopper_is_refused_with_tes_reason_the_architecture_and_the_release(fake_te: Any, fp8_gpu: Any) -> None:
    reason = "Device compute capability 10.0 or higher required for NVFP4 execution."
    fake_te.install(version=LATEST, probes={"is_fp8_available": (True, ""), "is_nvfp4_available": (False, reason)})
    with pytest.raises(ValueError, match=r"scaling='nvfp4'\) cannot run on this GPU with 'te': TransformerEngine says: "
                                         r"Device compute capability 10.0.*It needs TransformerEngine 2.8\+ on a "
                                         r"Blackwell GPU \(compute capability 10.0\+\)"):
        te_accelerator(scaling="nvfp4")


def test_nvfp4_rule_for_a_te_that_answers_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100")
    assert _capability_reason("nvfp4", torch.device("cuda")) == (
        "NVFP4 block scaling needs a Blackwell GPU (compute capability 10.0 or newer); NVIDIA H100 has compute "
        "capability 9.0")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (12, 0))  # NVFP4 runs on sm_120 too
    assert _capability_reason("nvfp4", torch.device("cuda")) is None


def test_nvfp4_converts_only_layers_aligned_to_128(fake_te: Any, fp8_gpu: Any) -> None:
    blackwell(fake_te)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 64))
    accelerator = te_accelerator(scaling="nvfp4")
    model = accelerator.prepare(model)
    assert type(model[0]).__name__ == "Linear" and model[0].__module__ != "torch.nn.modules.linear"
    assert isinstance(model[2], nn.Linear)
    assert "aligns NVFP4 GEMMs to 128" in accelerator.precision.conversion_report.details()


# ----------------------------------------------------------------------------- backward_override
@pytest.mark.parametrize("scaling", ["current", "block", "mxfp8", "nvfp4"])
@pytest.mark.parametrize("override", ["high_precision", "dequantized"])
def test_backward_override_reaches_every_recipe_but_delayed(
    fake_te: Any, fp8_gpu: Any, scaling: str, override: str
) -> None:
    blackwell(fake_te)
    recipe = te_accelerator(scaling=scaling, backward_override=override).precision.te_recipe
    (_, kwargs), = recipe_calls(fake_te)
    assert kwargs["backward_override"] == override and recipe.backward_override == override


def test_backward_override_is_refused_with_delayed_scaling(fake_te: Any, fp8_gpu: Any) -> None:
    blackwell(fake_te)
    for recipe in ({}, {"scaling": "delayed"}):  # delayed is the te backend's default
        with pytest.raises(ValueError, match=r"backward_override='dequantized'\) cannot run with delayed scaling.*"
                                             "DelayedScaling takes only backward_override=None"):
            te_accelerator(backward_override="dequantized", **recipe)
    assert recipe_calls(fake_te) == []  # refused before TE's DelayedScaling asserts


def test_backward_override_on_te_before_2_15_is_refused_not_dropped(fake_te: Any, fp8_gpu: Any) -> None:
    """TE 2.14's pydantic recipes would drop the keyword and run the backward unchanged."""
    blackwell(fake_te, version="2.14.0")
    with pytest.raises(ValueError, match=r"backward_override='high_precision'\) needs TransformerEngine 2.15 or newer"):
        te_accelerator(scaling="current", backward_override="high_precision")


@pytest.mark.parametrize("backend", ["native", "ao"])
def test_backward_override_is_refused_on_backends_without_it(backend: str) -> None:
    with pytest.raises(ValueError, match=f"sets backward_override, which the '{backend}' FP8 backend cannot honour"):
        Accelerator(mixed_precision="fp8", kwarg_handlers=[
            FP8RecipeKwargs(backend=backend, scaling="current", backward_override="high_precision")])


def test_backward_override_value_is_checked_by_the_recipe() -> None:
    assert FP8RecipeKwargs(backward_override="High_Precision").backward_override == "high_precision"
    with pytest.raises(ValueError, match="backward_override.*'fp32'.*high_precision.*dequantized"):
        FP8RecipeKwargs(backward_override="fp32")


# ----------------------------------------------------------------------------- the stand-in is TE
def test_stand_in_recipes_are_tes_pydantic_dataclasses(fake_te: Any) -> None:
    fake_te.install(version=LATEST)
    from transformer_engine.common import recipe as module

    with pytest.raises(ValueError, match="Delayed scaling only supports backward_override=None"):
        module.DelayedScaling(backward_override="high_precision")
    with pytest.raises(ValueError, match="NVTE_BACKWARD_OVERRIDE must be unset or one of"):
        module.Float8CurrentScaling(backward_override="fp32")
    with pytest.raises(ValueError, match="Only E4M3 is supported for NVFP4 scaling"):
        module.NVFP4BlockScaling(fp8_format=module.Format.HYBRID)
    module.MXFP8BlockScaling(interval=3)  # TE drops what it does not know ...
    assert fake_te.state.dropped == ["MXFP8BlockScaling.interval"]  # ... the stand-in notes it
    fake_te.state.dropped.clear()
    fake_te.install(version="2.7.0")
    from transformer_engine.common import recipe as old

    assert not hasattr(old, "NVFP4BlockScaling") and "backward_override" not in old.Float8CurrentScaling.__dataclass_fields__


# ----------------------------------------------------------------------------- one place decides the API
@pytest.mark.parametrize(("generation", "autocast", "init"), [("autocast", "autocast", "quantized_model_init"),
                                                              ("fp8_autocast", "fp8_autocast", "fp8_model_init")])
def test_autocast_and_fp8_weights_use_the_same_generation(
    fake_te: Any, fp8_gpu: Any, generation: str, autocast: str, init: str
) -> None:
    te = fake_te.install(generation=generation, version="2.10.0" if generation == "autocast" else "2.8.0")
    entry = TEApi.of(te)
    assert (entry.autocast_name, entry.model_init_name) == (autocast, init)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # TE >= 2.9's fp8_model_init warns: accel never calls it there
        accelerator = te_accelerator(fp8_params=True)
        model = accelerator.prepare(nn.Sequential(nn.Linear(16, 16)))
        model(torch.randn(8, 16))
    assert accelerator.precision.autocast_factory.api == autocast
    assert accelerator.precision.master_weights.api == init
    assert [c[0] for c in fake_te.state.calls if c[0] in ("autocast", "fp8_autocast")] == [autocast]
    assert isinstance(accelerator.precision.autocast_factory, TEAutocast)
