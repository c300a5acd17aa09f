"""The `te` backend against the stand-in TransformerEngine (both autocast API generations)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch
from torch import nn

from accel import Accelerator, FP8RecipeKwargs
from accel.backends.fp8.te import TransformerEngineFP8


class Tagged(nn.Linear):
    """A Linear subclass with nothing beyond weight and bias."""


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(32, 64)
        self.norm = nn.LayerNorm(64)
        self.plain_norm = nn.LayerNorm(64, elementwise_affine=False)
        self.down = nn.Linear(64, 32, bias=False)
        self.tagged = Tagged(32, 32)
        self.odd = nn.Linear(32, 10)
        self.head = nn.Linear(10, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.plain_norm(self.norm(torch.relu(self.up(x))))
        return self.head(self.odd(self.tagged(self.down(h))))


def te_accelerator(**recipe: object) -> Accelerator:
    """The te backend; the stand-in computes in fp32, so the base is fp32 unless a test says otherwise."""
    recipe.setdefault("base_precision", "fp32")
    return Accelerator(mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(backend="te", **recipe)])


@pytest.fixture
def te(fake_te: Any, fp8_gpu: Any) -> Any:
    fake_te.install()
    return fake_te


# ----------------------------------------------------------------------------- recipes
def test_default_recipe_is_delayed_scaling_with_exactly_the_checked_fields(te: Any) -> None:
    accelerator = te_accelerator()
    assert isinstance(accelerator.precision, TransformerEngineFP8)
    (name, kwargs), = [c for c in te.state.calls if c[0].endswith("Scaling")]
    assert name == "DelayedScaling"
    assert {k: getattr(v, "name", v) for k, v in kwargs.items()} == {
        "fp8_format": "HYBRID", "margin": 0, "amax_history_len": 1024, "amax_compute_algo": "max"}


def test_delayed_recipe_fields_reach_te(te: Any) -> None:
    te_accelerator(fp8_format="E4M3", margin=2, amax_history_len=16, amax_compute_algo="most_recent")
    (name, kwargs), = [c for c in te.state.calls if c[0].endswith("Scaling")]
    assert name == "DelayedScaling"
    assert {k: getattr(v, "name", v) for k, v in kwargs.items()} == {
        "fp8_format": "E4M3", "margin": 2, "amax_history_len": 16, "amax_compute_algo": "most_recent"}


def test_current_scaling_builds_float8_current_scaling(te: Any) -> None:
    te_accelerator(scaling="current", fp8_format="E4M3")
    (name, kwargs), = [c for c in te.state.calls if c[0].endswith("Scaling")]
    assert name == "Float8CurrentScaling" and list(kwargs) == ["fp8_format"] and kwargs["fp8_format"].name == "E4M3"


@pytest.mark.parametrize("field", [{"margin": 1}, {"amax_history_len": 8}, {"amax_compute_algo": "most_recent"}])
def test_delayed_only_field_with_current_scaling_raises(te: Any, field: Any) -> None:
    with pytest.raises(ValueError, match="only delayed scaling uses"):
        te_accelerator(scaling="current", **field)


def test_optimization_level_is_ms_amps_and_raises_with_te(te: Any) -> None:
    with pytest.raises(ValueError, match="optimization_level, which the 'te' FP8 backend cannot honour"):
        te_accelerator(optimization_level="O2")


def test_rowwise_scaling_is_torchaos_and_raises_with_te(te: Any) -> None:
    with pytest.raises(ValueError, match="scaling='rowwise'.*'te'"):
        te_accelerator(scaling="rowwise")


def test_mxfp8_on_hopper_raises_with_tes_reason(fake_te: Any, fp8_gpu: Any) -> None:
    reason = "Device compute capability 10.0 or higher required for MXFP8 execution."
    fake_te.install(probes={"is_mxfp8_available": (False, reason)})
    with pytest.raises(ValueError, match="scaling='mxfp8'.*compute capability 10.0"):
        te_accelerator(scaling="mxfp8")


def test_mxfp8_on_blackwell_builds_mxfp8_block_scaling(fake_te: Any, fp8_gpu: Any) -> None:
    fake_te.install(probes={"is_mxfp8_available": (True, "")})
    te_accelerator(scaling="mxfp8")
    assert [c[0] for c in fake_te.state.calls if c[0].endswith("Scaling")] == ["MXFP8BlockScaling"]


def test_block_scaling_without_te_probe_uses_the_documented_rule(fake_te: Any, fp8_gpu: Any, monkeypatch: Any) -> None:
    fake_te.install(generation="fp8_autocast", version="2.5.0")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 9))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA L4")
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    with pytest.raises(ValueError, match=r"block scaling needs a Hopper GPU \(compute capability 9.x\).*NVIDIA L4.*CUDA 12.4"):
        te_accelerator(scaling="block")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (10, 0))  # TE < 2.9: Hopper only
    monkeypatch.setattr(torch.version, "cuda", "12.9")
    with pytest.raises(ValueError, match="block scaling needs a Hopper GPU.*compute capability 10.0"):
        te_accelerator(scaling="block")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert type(te_accelerator(scaling="block").precision.te_recipe).__name__ == "Float8BlockScaling"


def test_te_before_2_9_answers_with_its_own_check_support(fake_te: Any, fp8_gpu: Any, monkeypatch: Any) -> None:
    """TE 2.0-2.8 have no te.is_*_available but transformer_engine.pytorch.fp8.check_*_support(): accel asks
    those (TE's Ada rule included: CUDA >= 12.1 and cuBLASLt >= 12.1.3) before its own rules."""
    import sys
    import types

    fake_te.install(generation="fp8_autocast", version="2.5.0")
    fp8_module = types.ModuleType("transformer_engine.pytorch.fp8")
    fp8_module.check_fp8_support = lambda: (False, "CublasLt version 12.1.3.x or higher required for FP8 execution on Ada.")
    monkeypatch.setitem(sys.modules, "transformer_engine.pytorch.fp8", fp8_module)
    with pytest.raises(ValueError, match="TransformerEngine says: CublasLt version 12.1.3"):
        te_accelerator()


def test_ada_without_cuda_12_1_is_refused_by_the_documented_rule(fake_te: Any, fp8_gpu: Any, monkeypatch: Any) -> None:
    fake_te.install(generation="fp8_autocast", version="2.5.0")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 9))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA L4")
    monkeypatch.setattr(torch.version, "cuda", "12.0")
    from accel.kwargs_handlers.handlers import Handlers

    recipe = FP8RecipeKwargs(backend="te", base_precision="fp32")
    with pytest.raises(ValueError, match=r"FP8 on Ada .*needs CUDA 12.1 or newer .*CUDA 12.0"):
        TransformerEngineFP8(torch.device("cuda"), Handlers({FP8RecipeKwargs: recipe}))



def test_recipe_missing_from_an_old_te_raises_naming_the_version(fake_te: Any, fp8_gpu: Any) -> None:
    fake_te.install(generation="fp8_autocast", version="2.1.0", recipes=("DelayedScaling", "MXFP8BlockScaling"))
    with pytest.raises(ValueError, match="Float8CurrentScaling, which the installed TransformerEngine does not have "
                                         r"\(added in 2.2\)"):
        te_accelerator(scaling="current")


# ----------------------------------------------------------------------------- autocast generations
@pytest.mark.parametrize("generation", ["autocast", "fp8_autocast"])
def test_forward_runs_under_the_installed_autocast_with_its_keyword(
    fake_te: Any, fp8_gpu: Any, generation: Any
) -> None:
    fake_te.install(generation=generation)
    accelerator = te_accelerator()
    model = accelerator.prepare(nn.Sequential(nn.Linear(16, 16)))
    model(torch.randn(8, 16))
    (name, kwargs), = fake_te.state.autocast_calls()
    assert name == generation
    assert kwargs["enabled"] is True and kwargs["recipe"] is accelerator.precision.te_recipe
    assert fake_te.state.forwards == [("Linear", True, accelerator.precision.te_recipe)]


@pytest.mark.parametrize("generation", ["autocast", "fp8_autocast"])
@pytest.mark.parametrize("in_eval", [False, True])
def test_eval_runs_fp8_only_when_asked(fake_te: Any, fp8_gpu: Any, generation: Any, in_eval: Any) -> None:
    fake_te.install(generation=generation)
    accelerator = te_accelerator(use_autocast_during_eval=in_eval)
    model = accelerator.prepare(nn.Sequential(nn.Linear(16, 16)))
    model.eval()
    model(torch.randn(8, 16))
    model.train()
    model(torch.randn(8, 16))
    assert [kwargs["enabled"] for _, kwargs in fake_te.state.autocast_calls()] == [in_eval, True]


def test_autocast_keyword_of_one_generation_is_refused_by_the_other(fake_te: Any) -> None:
    te = fake_te.install(generation="fp8_autocast")
    assert not hasattr(te, "autocast")
    with pytest.raises(TypeError):
        te.fp8_autocast(enabled=True, recipe=None)
    te = fake_te.install(generation="autocast")
    with pytest.raises(TypeError):
        te.autocast(enabled=True, fp8_recipe=None)


# ----------------------------------------------------------------------------- conversion
def test_conversion_replaces_linears_and_layer_norms_with_weights_copied(te: Any, caplog: Any) -> None:
    torch.manual_seed(0)
    model, x = Net(), torch.randn(8, 32)
    expected = model(x)
    accelerator = te_accelerator()
    with caplog.at_level(logging.INFO, logger="accel"):
        prepared = accelerator.prepare(model)
    te_module = te.te
    assert isinstance(prepared.up, te_module.Linear) and isinstance(prepared.down, te_module.Linear)
    assert isinstance(prepared.tagged, te_module.Linear) and prepared.down.bias.numel() == 0
    assert isinstance(prepared.odd, nn.Linear) and isinstance(prepared.head, nn.Linear)
    assert isinstance(prepared.norm, te_module.LayerNorm) and isinstance(prepared.plain_norm, nn.LayerNorm)
    torch.testing.assert_close(prepared(x), expected)
    report = accelerator.precision.conversion_report
    assert report.summary() == "FP8: converted 3 of 5 Linear layers (skipped: 2 not a multiple of 16)"
    norms = accelerator.precision.layer_norm_report
    assert [(d.name, d.converted) for d in norms.layers] == [("norm", True), ("plain_norm", False)]
    assert "always learns a weight and a bias" in norms.layers[1].reason
    assert "converted 1 of 2 LayerNorm layers (skipped: 1 without affine weight or bias)" in caplog.text
    linears = [kwargs for name, kwargs in te.state.calls if name == "Linear"]
    assert {k: linears[1][k] for k in ("bias", "params_dtype", "device")} == {
        "bias": False, "params_dtype": torch.float32, "device": torch.device("cpu")}


def test_excluded_and_multi_dim_layer_norms_are_reported(te: Any) -> None:
    model = nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16), nn.LayerNorm((4, 4)), nn.Linear(16, 16))
    accelerator = te_accelerator(exclude_modules=("1", "3"))
    accelerator.prepare(model)
    norms = {d.name: d for d in accelerator.precision.layer_norm_report.layers}
    assert norms["1"].reason == "excluded by pattern '1'" and "only the last dim" in norms["2"].reason
    assert [d.name for d in accelerator.precision.conversion_report.converted] == ["0"]


def test_optimizer_built_before_prepare_steps_the_te_parameters(te: Any) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16), nn.Linear(16, 16))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    accelerator = te_accelerator()
    model = accelerator.prepare(model)
    optimizer = accelerator.prepare(optimizer)  # a later call: after_prepare re-points it
    assert {id(p) for g in optimizer.param_groups for p in g["params"]} == {id(p) for p in model.parameters()}
    before = [p.detach().clone() for p in model.parameters()]
    accelerator.backward(model(torch.randn(8, 16)).square().mean())
    optimizer.step()
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_optimizer_prepared_before_the_model_is_re_pointed_too(te: Any) -> None:
    model = nn.Sequential(nn.Linear(16, 16))
    raw = torch.optim.Adam(model.parameters())
    accelerator = te_accelerator()
    optimizer = accelerator.prepare(raw)
    model = accelerator.prepare(model)
    assert [id(p) for p in raw.param_groups[0]["params"]] == [id(p) for p in model.parameters()]
    assert optimizer.optimizer is raw


def test_saved_weights_keep_the_original_names_without_te_extra_state(te: Any) -> None:
    model = nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16))
    names = set(model.state_dict())
    accelerator = te_accelerator()
    prepared = accelerator.prepare(model)
    assert any(name.endswith("_extra_state") for name in prepared.state_dict())
    assert set(accelerator.get_state_dict(prepared)) == names


# ----------------------------------------------------------------------------- capability
def test_te_on_this_cpu_raises_with_every_reason() -> None:
    with pytest.raises(RuntimeError) as error:
        te_accelerator()
    message = str(error.value)
    assert "backend='te') cannot run here: TransformerEngine is not installed (install it on a machine with CUDA " \
           "and cuDNN: pip install" in message
    assert "; the device is cpu, not a CUDA GPU with FP8 (compute capability >= 8.9)." in message
    assert "will not run another backend or precision in its place" in message


def test_availability_reasons(fake_te: Any, fp8_gpu: Any, monkeypatch: Any) -> None:
    cpu = torch.device("cpu")
    fake_te.install(version="1.13.0")
    assert TransformerEngineFP8.availability(cpu) == (
        "TransformerEngine 1.13.0 is installed, accel needs 2.0 or newer (install it on a machine with CUDA and "
        "cuDNN: pip install --no-build-isolation 'transformer_engine[pytorch]', as docs/fp8-backends.md says)")
    fake_te.install(version="2.9.0.dev0+abc")
    assert TransformerEngineFP8.availability(cpu) is None
    monkeypatch.delitem(__import__("sys").modules, "transformer_engine.pytorch")
    monkeypatch.setattr("accel.backends.fp8.te._import_te", _raise(OSError("libcudnn.so.9: cannot open")))
    assert TransformerEngineFP8.availability(cpu) == (
        "TransformerEngine is installed but does not import: OSError: libcudnn.so.9: cannot open")


def _raise(error: Exception) -> Any:
    def fail() -> None:
        raise error

    return fail


def test_a_model_without_an_fp8_linear_raises_and_stays_as_it_was(te: Any) -> None:
    model = nn.Sequential(nn.Linear(10, 3), nn.LayerNorm(3))
    with pytest.raises(ValueError, match="found no linear layer .* it can run in FP8"):
        te_accelerator().prepare(model)
    assert isinstance(model[1], nn.LayerNorm)


@pytest.mark.parametrize(("api", "recipe_key", "group_key"), [("autocast", "recipe", "amax_reduction_group"),
                                                             ("fp8_autocast", "fp8_recipe", "fp8_group")])
def test_autocast_passes_the_process_group_in_each_api_generation(api: str, recipe_key: str, group_key: str) -> None:
    import types

    from accel.backends.fp8.te_api import TEAutocast

    calls: list[dict[str, object]] = []
    te = types.SimpleNamespace(**{api: lambda **kwargs: calls.append(kwargs)})
    group, recipe = object(), object()
    TEAutocast(te, recipe, group)(True)  # type: ignore[arg-type]
    TEAutocast(te, recipe)(False)  # type: ignore[arg-type]
    assert calls == [{"enabled": True, recipe_key: recipe, group_key: group}, {"enabled": False, recipe_key: recipe}]


def test_mxfp8_converts_only_layers_whose_dims_are_multiples_of_32(fake_te: Any, fp8_gpu: Any) -> None:
    """TE's MXFP8 scales blocks of 32 values: a 48-wide Linear (fine for FP8's 16) stays high precision,
    and the report says why; the stand-in TE refuses MXFP8 GEMMs on other widths as TE does."""
    fake_te.install(probes={"is_mxfp8_available": (True, "")})
    accelerator = te_accelerator(scaling="mxfp8")
    model = accelerator.prepare(nn.Sequential(nn.Linear(64, 48), nn.ReLU(), nn.Linear(48, 64), nn.Linear(64, 64)))
    report = accelerator.precision.conversion_report
    assert [d.name for d in report.converted] == ["3"]
    assert report.summary() == "FP8: converted 1 of 3 Linear layers (skipped: 2 not a multiple of 32)"
    assert "out_features 48 is not a multiple of 32 (TransformerEngine's MXFP8 scales blocks of 32 values)" in str(report)
    model(torch.randn(32, 64)).sum().backward()
    with pytest.raises(AssertionError, match="height divisible by 32"):
        model(torch.randn(16, 64))  # TE's own runtime rule on tokens, for the user to pad


def test_stand_in_autocast_refuses_a_recipe_the_gpu_cannot_run(fake_te: Any, fp8_gpu: Any) -> None:
    te_module = fake_te.install(probes={"is_mxfp8_available": (False, "MXFP8 needs compute capability 10.0")})
    recipe = _stand_in_recipe("MXFP8BlockScaling")
    with pytest.raises(AssertionError, match="MXFP8 needs compute capability 10.0"):
        with te_module.autocast(enabled=True, recipe=recipe):
            pass


def _stand_in_recipe(name: str) -> Any:
    import sys

    return getattr(sys.modules["transformer_engine.common.recipe"], name)()


def test_te_modules_are_built_on_the_training_device_wherever_the_model_is(te: Any) -> None:
    """With device_placement=False the model may still be on the CPU: TE's modules (CUDA only) are built on
    the training device all the same. Here the 'training device' is meta, the model on the CPU."""
    from accel.kwargs_handlers.handlers import Handlers

    backend = TransformerEngineFP8(torch.device("meta"), Handlers({FP8RecipeKwargs: FP8RecipeKwargs(base_precision="fp32")}))
    model = backend.convert_module(Net())
    assert {c[1]["device"] for c in te.state.calls if c[0] in ("Linear", "LayerNorm")} == {torch.device("meta")}
    assert model.up.weight.device.type == "meta"


# ----------------------------------------------------------------------------- the stand-in itself
@pytest.mark.parametrize(
    ("generation", "message"),
    [("autocast", "product of all dimensions except the last to be divisible by 8"),
     ("fp8_autocast", "2D input matrices with height divisible by 8")],
)
def test_stand_in_checks_input_and_weight_dims_as_te_linear_does(fake_te: Any, generation: str, message: str) -> None:
    """te.Linear's forward runs assert_dim_for_fp8_exec(inputmat, weight): the weight's out_features % 8 too."""
    te_module = fake_te.install(generation=generation)
    autocast = te_module.autocast if generation == "autocast" else te_module.fp8_autocast
    keyword = "recipe" if generation == "autocast" else "fp8_recipe"
    recipe = _stand_in_recipe("DelayedScaling")
    with autocast(enabled=True, **{keyword: recipe}):
        te_module.Linear(16, 32, device="cpu")(torch.randn(8, 16))  # fine
        with pytest.raises(AssertionError, match=message):
            te_module.Linear(16, 20, device="cpu")(torch.randn(8, 16))  # weight (20, 16): 20 % 8
        with pytest.raises(AssertionError, match=message):
            te_module.Linear(16, 32, device="cpu")(torch.randn(6, 16))  # 6 tokens
    te_module.Linear(16, 20, device="cpu")(torch.randn(6, 16))  # outside FP8 autocast: no rule


def test_stand_in_autocast_refuses_any_fp8_recipe_on_a_gpu_without_fp8(fake_te: Any) -> None:
    te_module = fake_te.install(probes={"is_fp8_available": (False, "Device compute capability 8.9 or higher required")})
    with pytest.raises(AssertionError, match="8.9 or higher required"):
        with te_module.autocast(enabled=True, recipe=_stand_in_recipe("DelayedScaling")):
            pass
    with te_module.autocast(enabled=False, recipe=_stand_in_recipe("DelayedScaling")):
        pass  # disabled autocast checks nothing
