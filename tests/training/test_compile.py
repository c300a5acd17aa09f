"""torch.compile through the Accelerator: every precision trains compiled as it trains eagerly, model
files and checkpoints carry the uncompiled names, a compiled run resumes, and bad options raise at
construction. Most tests compile with aot_eager (AOTAutograd's forward/backward graphs, no code
generation: seconds on two cores); one compiles with inductor."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from torch import nn
from torch._dynamo.utils import counters

from accel import Accelerator, FP8RecipeKwargs
from accel.utils import TorchDynamoPlugin

STEPS = 3
PRECISIONS: list[tuple[str, dict[str, Any], float]] = [
    ("no", {}, 1e-6),
    ("fp16", {}, 1e-3),
    ("bf16", {}, 1e-3),
    ("16-true", {}, 1e-2),
    ("bf16-true", {}, 2e-2),
    ("fp8", {"backend": "native"}, 1e-3),
    ("fp8", {"backend": "native", "optimization_level": "O2"}, 1e-3),
    ("fp8", {"backend": "ao"}, 1e-3),
]
"""(precision, FP8 recipe, tolerance of compiled against eager)."""


def tiny_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 16))


def batches(count: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(16, 32, generator=generator), torch.randn(16, 16, generator=generator)) for _ in range(count)]


def accelerator_for(precision: str, recipe: dict[str, Any], **compile_options: Any) -> Accelerator:
    handlers = [FP8RecipeKwargs(**recipe)] if recipe else []
    plugin = TorchDynamoPlugin(**compile_options) if compile_options else None
    return Accelerator(mixed_precision=precision, kwarg_handlers=handlers, dynamo_plugin=plugin)


def train(accelerator: Accelerator, model: nn.Module, data: list[Any]) -> tuple[nn.Module, torch.optim.Optimizer, list[float]]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-4)  # eps representable in fp16 (16-true)
    model, optimizer = accelerator.prepare(model, optimizer)
    losses = []
    for x, y in data:
        loss = nn.functional.mse_loss(model(x).float(), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return model, optimizer, losses


def skip_without(recipe: dict[str, Any]) -> None:
    if recipe.get("backend") == "ao" and importlib.util.find_spec("torchao") is None:
        pytest.skip("torchao is not installed")


@pytest.mark.parametrize(("precision", "recipe", "tolerance"), PRECISIONS,
                         ids=[p if not r else f"{p}-{'-'.join(r.values())}" for p, r, _ in PRECISIONS])
def test_each_precision_trains_compiled_as_eager(precision: str, recipe: dict[str, Any], tolerance: float) -> None:
    skip_without(recipe)
    data = batches(STEPS)
    eager_accelerator = accelerator_for(precision, recipe)
    eager, _, eager_losses = train(eager_accelerator, tiny_model(), data)
    torch._dynamo.reset()  # another test's graphs for the same code would otherwise be reused
    compiled_before = counters["frames"]["ok"]
    accelerator = accelerator_for(precision, recipe, backend="aot_eager")
    compiled, _, losses = train(accelerator, tiny_model(), data)
    assert isinstance(compiled, torch._dynamo.eval_frame.OptimizedModule)
    assert counters["frames"]["ok"] > compiled_before  # dynamo really compiled frames
    assert accelerator.mixed_precision == eager_accelerator.mixed_precision
    assert losses == pytest.approx(eager_losses, rel=tolerance, abs=tolerance)
    expected = eager_accelerator.get_state_dict(eager)
    for name, tensor in accelerator.get_state_dict(compiled).items():
        torch.testing.assert_close(tensor, expected[name], rtol=tolerance * 10, atol=tolerance * 10)
    if precision == "fp16":
        assert accelerator.scaler is not None and accelerator.scaler.get_scale() == eager_accelerator.scaler.get_scale()


def test_inductor_compiles_and_trains_as_eager() -> None:
    data = batches(STEPS)
    _, _, eager_losses = train(Accelerator(), tiny_model(), data)
    model, _, losses = train(Accelerator(dynamo_backend="inductor"), tiny_model(), data)
    assert isinstance(model, torch._dynamo.eval_frame.OptimizedModule)
    assert losses == pytest.approx(eager_losses, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("level", ["O1", "O2"])
def test_native_fp8_compiles_as_one_graph(level: str) -> None:
    """fullgraph=True raises at any graph break: the native FP8 layers must trace whole."""
    recipe = {"backend": "native", "optimization_level": level}
    data = batches(STEPS)
    _, _, eager_losses = train(accelerator_for("fp8", recipe), tiny_model(), data)
    torch._dynamo.reset()
    _, _, losses = train(accelerator_for("fp8", recipe, backend="aot_eager", fullgraph=True), tiny_model(), data)
    assert losses == pytest.approx(eager_losses, rel=1e-3, abs=1e-3)


def test_files_and_checkpoints_carry_the_uncompiled_names(tmp_path: Path) -> None:
    accelerator = Accelerator(dynamo_backend="aot_eager")
    model, _, _ = train(accelerator, tiny_model(), batches(1))
    names = [name for name, _ in tiny_model().named_parameters()]
    assert list(accelerator.get_state_dict(model)) == names
    assert isinstance(accelerator.unwrap_model(model), torch._dynamo.eval_frame.OptimizedModule)
    assert isinstance(accelerator.unwrap_model(model, keep_torch_compile=False), nn.Sequential)
    accelerator.save_model(model, tmp_path / "model")
    assert sorted(load_file(tmp_path / "model" / "model.safetensors")) == sorted(names)
    accelerator.save_state(tmp_path / "state")
    saved = [load_file(path) for path in (tmp_path / "state").rglob("*.safetensors")]
    assert saved and all(sorted(weights) == sorted(names) for weights in saved)


def test_a_compiled_run_resumes_exactly(tmp_path: Path) -> None:
    data = batches(4)
    accelerator = Accelerator(dynamo_backend="aot_eager")
    model, optimizer, _ = train(accelerator, tiny_model(), data[:2])
    accelerator.save_state(tmp_path / "checkpoint")
    for x, y in data[2:]:
        accelerator.backward(nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
    resumed_accelerator = Accelerator(dynamo_backend="aot_eager")
    fresh = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 16))  # other initial weights
    resumed, resumed_optimizer, _ = train(resumed_accelerator, fresh, [])
    resumed_accelerator.load_state(tmp_path / "checkpoint")
    for x, y in data[2:]:
        resumed_accelerator.backward(nn.functional.mse_loss(resumed(x), y))
        resumed_optimizer.step()
        resumed_optimizer.zero_grad()
    expected = accelerator.get_state_dict(model)
    for name, tensor in resumed_accelerator.get_state_dict(resumed).items():
        assert torch.equal(tensor, expected[name]), name


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_DYNAMO_BACKEND", "AOT_EAGER")
    monkeypatch.setenv("ACCEL_DYNAMO_USE_FULLGRAPH", "true")
    monkeypatch.setenv("ACCEL_DYNAMO_USE_DYNAMIC", "false")
    plugin = Accelerator().dynamo_plugin
    assert (plugin.backend, plugin.mode, plugin.fullgraph, plugin.dynamic) == ("aot_eager", "default", True, False)
    with pytest.warns(UserWarning, match="backend='eager' given in the code overrides ACCEL_DYNAMO_BACKEND='AOT_EAGER'"):
        assert Accelerator(dynamo_backend="eager").state.dynamo_plugin.backend == "eager"


@pytest.mark.parametrize(("options", "message"), [
    ({"dynamo_backend": "inductr"}, "dynamo_backend='inductr' is not accepted.*Did you mean 'inductor'"),
    ({"dynamo_backend": "tensorrt"}, "dynamo_backend='tensorrt' is not a torch.compile backend in torch"),
    ({"dynamo_plugin": TorchDynamoPlugin(backend="inductor", mode="reduce-overhead")},
     "mode 'reduce-overhead' runs CUDA graphs, which need a CUDA device"),
    ({"dynamo_backend": "eager", "dynamo_plugin": TorchDynamoPlugin()}, "give the backend in one place"),
])
def test_bad_options_raise_at_construction(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Accelerator(**options)


@pytest.mark.parametrize(("fields", "message"), [
    ({"mode": "fast"}, "TorchDynamoPlugin.mode='fast' is not accepted"),
    ({"backend": "eager", "mode": "max-autotune"},
     "mode='max-autotune' is not accepted with backend 'eager'.*Use mode 'default'"),
    ({"backend": "inductor", "mode": "max-autotune", "options": {"trace.enabled": True}}, "takes one or the other"),
])
def test_bad_plugin_fields_raise(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TorchDynamoPlugin(**fields)


def test_a_mode_from_the_environment_is_checked_against_the_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_DYNAMO_MODE", "max-autotune")
    with pytest.raises(ValueError, match="ACCEL_DYNAMO_MODE='max-autotune' is not accepted with backend 'aot_eager'"):
        Accelerator(dynamo_backend="aot_eager")
