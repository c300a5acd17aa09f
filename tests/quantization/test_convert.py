"""prepare() quantizes the nn.Linear layers for real (bitsandbytes on CPU): names, the other parameters
and hooks kept, a report per layer, each mode trains, and bad combinations raise at construction."""

from __future__ import annotations

import importlib.util
import warnings

import pytest
import torch
from torch import nn

pytest.importorskip("bitsandbytes")
import bitsandbytes as bnb  # noqa: E402

from accel import Accelerator, BitsandbytesKwargs  # noqa: E402
from accel.quantization import capability  # noqa: E402
from quantization.models import Net, batch, net  # noqa: E402


def _prepared(mode: str = "nf4-dq", precision: str = "no", **options: object) -> tuple[Accelerator, nn.Module]:
    accelerator = Accelerator(mixed_precision=precision, kwarg_handlers=[BitsandbytesKwargs(mode=mode, **options)])
    return accelerator, accelerator.prepare(net())


def test_layers_are_replaced_under_their_names_keeping_bias_hooks_and_other_parameters() -> None:
    model = net()
    calls: list[str] = []
    model.fc1.register_forward_hook(lambda module, args, out: calls.append(type(module).__name__))
    bias, norm = model.fc1.bias, model.norm.weight
    accelerator = Accelerator(kwarg_handlers=[BitsandbytesKwargs(mode="nf4")])
    prepared = accelerator.prepare(model)
    assert prepared is model
    assert isinstance(model.fc1, bnb.nn.Linear4bit) and isinstance(model.head, bnb.nn.Linear4bit)
    assert model.fc1.bias is bias and model.norm.weight is norm
    assert model.fc1.weight.dtype == torch.uint8 and not model.fc1.weight.requires_grad
    model(batch()[0])
    assert calls == ["QuantLinear4bit"]
    assert accelerator.quantization_report.summary() == "bitsandbytes nf4: quantized 3 of 3 Linear layers"


@pytest.mark.parametrize("mode", ["nf4", "nf4-dq", "fp4", "fp4-dq", "int8", "int8-training"])
def test_every_mode_matches_the_full_precision_model_and_trains(mode: str) -> None:
    x, y = batch()
    reference = net()(x)
    accelerator, model = _prepared(mode)
    assert (model(x) - reference).norm() / reference.norm() < 0.2  # 4-bit: a few % off; int8: < 1 %
    optimizer = accelerator.prepare(torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-2))
    losses = []
    for _ in range(8):
        loss = nn.functional.cross_entropy(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.1
    assert model.fc1.weight.requires_grad is (mode == "int8-training")


def test_bf16_mixed_computes_in_bf16_inside_the_layer_and_returns_the_input_dtype() -> None:
    accelerator, model = _prepared("nf4", "bf16")
    assert model.fc1.compute_dtype is torch.bfloat16
    seen: list[torch.dtype] = []
    model.fc2.register_forward_pre_hook(lambda module, args: seen.append(args[0].dtype))
    out = model(batch(n=2)[0])
    assert out.dtype is torch.float32 and model.fc1.bias.dtype is torch.float32  # the bias is never rewritten
    assert seen == [torch.float32]  # fc1 gave back its input's dtype


def test_dtype_overrides_the_precision_and_int8_defaults_to_float16() -> None:
    assert _prepared("nf4", "no", dtype=torch.bfloat16)[1].fc1.compute_dtype is torch.bfloat16
    assert _prepared("int8")[1].fc1.compute_dtype is torch.float16


def test_ignore_modules_keeps_layers_and_warns_about_a_pattern_that_matches_nothing() -> None:
    with pytest.warns(UserWarning, match=r"'decoder\.\*' matched no module of Net"):
        accelerator, model = _prepared(ignore_modules=["head", "decoder.*"])
    assert type(model.head) is nn.Linear and isinstance(model.fc1, bnb.nn.Linear4bit)
    report = accelerator.quantization_report
    assert report.summary().startswith("bitsandbytes nf4-dq: quantized 2 of 3 Linear layers (skipped: 1 excluded)")
    assert "head (32 -> 8): skipped: kept by ignore_modules pattern 'head'" in report.details()


def test_tied_weights_and_multihead_attention_are_skipped_with_the_reason() -> None:
    model = nn.Sequential(nn.Embedding(8, 32), nn.Linear(32, 8, bias=False), nn.Linear(32, 32))
    model[1].weight = model[0].weight
    attention = nn.Sequential(nn.MultiheadAttention(32, 2), nn.Linear(32, 32))
    accelerator = Accelerator(kwarg_handlers=[BitsandbytesKwargs(mode="nf4")])
    accelerator.prepare(model)
    assert "1 (32 -> 8): skipped: its weight is also 0.weight" in accelerator.quantization_report.details()
    assert type(model[1]) is nn.Linear and isinstance(model[2], bnb.nn.Linear4bit)
    accelerator.prepare(attention)
    assert "0.out_proj (32 -> 32): skipped: nn.MultiheadAttention reads" in accelerator.quantization_report.details()


def test_a_model_without_linear_layers_is_refused() -> None:
    accelerator = Accelerator(kwarg_handlers=[BitsandbytesKwargs()])
    with pytest.raises(ValueError, match="Sequential has no nn.Linear layer to quantize"):
        accelerator.prepare(nn.Sequential(nn.Conv1d(2, 2, 3)))
    with pytest.raises(ValueError, match=r"Net has no nn.Linear layer to quantize.*quantized 0 of 3"):
        Accelerator(kwarg_handlers=[BitsandbytesKwargs(ignore_modules=["*"])]).prepare(net())


def test_fp8_and_float64_compute_are_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="mixed_precision='fp8' cannot run: both replace the model's nn.Linear"):
        Accelerator(mixed_precision="fp8", kwarg_handlers=[BitsandbytesKwargs()])
    with pytest.raises(ValueError, match=r"'64-true' would compute in torch.float64.*dtype=torch.float32"):
        Accelerator(mixed_precision="64-true", kwarg_handlers=[BitsandbytesKwargs()])
    model = Accelerator(mixed_precision="64-true", kwarg_handlers=[BitsandbytesKwargs(dtype="fp32")]).prepare(net())
    assert model(batch(n=2)[0].double()).dtype is torch.float64


def test_missing_bitsandbytes_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a))
    with pytest.raises(ModuleNotFoundError, match=r"bitsandbytes is not installed: pip install bitsandbytes"):
        Accelerator(kwarg_handlers=[BitsandbytesKwargs()])
    assert "pip install bitsandbytes" in capability.capability_line(torch.device("cpu"))


def test_capability_runs_every_mode_on_this_cpu() -> None:
    assert capability.supported_modes(torch.device("cpu")) == dict.fromkeys(
        ["nf4", "nf4-dq", "fp4", "fp4-dq", "int8", "int8-training"]
    )
    assert "meta device" in capability.mode_reason("nf4", torch.device("meta"))


def test_init_module_builds_quantized_layers_directly() -> None:
    accelerator = Accelerator(kwarg_handlers=[BitsandbytesKwargs(mode="nf4")])
    with accelerator.init_module():
        model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8))
    assert type(model[0]).__name__ == "QuantLinear4bit" and model[0].weight.dtype == torch.uint8
    assert nn.Linear.__name__ == "Linear"  # restored on leaving
    full = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8))
    model.load_state_dict(full.state_dict())  # full-precision weights are quantized on the way in
    accelerator.prepare(model)
    x = batch()[0]
    assert (model(x) - full(x)).abs().max() < 0.1
    assert accelerator.quantization_report.summary() == "bitsandbytes nf4: quantized 0 of 2 Linear layers (skipped: 2 already converted)"
    with pytest.raises(ValueError, match="init_module\\(\\) with BitsandbytesKwargs\\(ignore_modules="):
        Accelerator(kwarg_handlers=[BitsandbytesKwargs(ignore_modules=["x"])]).init_module()


def test_optimizer_over_the_replaced_weights_is_refused() -> None:
    model = net()
    optimizer = torch.optim.AdamW(model.parameters())
    accelerator = Accelerator(kwarg_handlers=[BitsandbytesKwargs(mode="nf4")])
    with pytest.raises(ValueError, match=r"AdamW holds 3 full-precision weights .*\(fc1.weight, fc2.weight, head.weight\)"):
        accelerator.prepare(model, optimizer)
    accelerator.prepare(torch.optim.AdamW([p for p in model.parameters() if p.requires_grad]))
