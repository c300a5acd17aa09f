"""The native FP8 backend through the Accelerator: conversion, O1/O2 storage, scaling, steps, files."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from accel import Accelerator, FP8RecipeKwargs
from accel.backends.native_fp8 import Float8Linear

WIDTH = 32


class Net(nn.Module):
    """Embedding, two FP8-eligible Linears, a LayerNorm and a head that is not a multiple of 16."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, WIDTH)
        self.fc1 = nn.Linear(WIDTH, 64)
        self.fc2 = nn.Linear(64, WIDTH)
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, 10)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        h = self.norm(h + self.fc2(torch.relu(self.fc1(h))))
        return self.head(h)


def data(seed: int = 0, batch: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 16, (batch,), generator=generator)
    return tokens, (tokens * 7 + 3) % 10


def fp8(**recipe: Any) -> Accelerator:
    """The native backend; FP8 numerics are compared with fp32, so the base is fp32 unless a test says otherwise."""
    recipe.setdefault("base_precision", "fp32")
    return Accelerator(mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(backend="native", **recipe)])


def make(seed: int = 0) -> Net:
    torch.manual_seed(seed)
    return Net()


def train(accelerator: Accelerator, model: nn.Module, optimizer: Any, steps: int, scheduler: Any = None) -> list[float]:
    tokens, labels = data()
    losses = []
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(tokens), labels)
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def prepared(level: str = "O1", lr: float = 1e-2, **recipe: Any) -> tuple[Accelerator, Net, Any]:
    accelerator = fp8(optimization_level=level, **recipe)
    model = make()
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=lr))
    return accelerator, model, optimizer


def optimizer_tensors(model: nn.Module, optimizer: Any) -> list[torch.Tensor]:
    """Every optimizer state tensor, in parameter order, copied."""
    return [v.clone() for p in model.parameters() for v in optimizer.state.get(p, {}).values()]


def storage_snapshot(model: nn.Module, optimizer: Any) -> list[torch.Tensor]:
    """Every parameter's storage and every optimizer state tensor, copied bit for bit."""
    return [p.detach().clone() for p in model.parameters()] + optimizer_tensors(model, optimizer)


def same_bits(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(x.dtype == y.dtype and torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8))
                                    for x, y in zip(a, b))


# --------------------------------------------------------------------------- conversion
def test_the_report_lists_every_linear_and_one_summary_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    accelerator = fp8()
    with caplog.at_level(logging.INFO, logger="accel"):
        model = accelerator.prepare(make())
    report = accelerator.precision.conversion_report
    assert [d.name for d in report.converted] == ["fc1", "fc2"]
    assert [(d.name, d.reason) for d in report.skipped] == [("head", "out_features 10 is not a multiple of 16")]
    assert isinstance(model.fc1, Float8Linear) and type(model.head) is nn.Linear
    summaries = [r.getMessage() for r in caplog.records if r.getMessage().startswith("FP8: converted")]
    assert summaries == [
        "FP8: converted 2 of 3 Linear layers (skipped: 1 not a multiple of 16); weight matrices outside FP8: 1 Embedding"
    ]
    assert [(h.name, h.kind) for h in report.others] == [("embed", "Embedding")]


def test_a_converted_model_is_not_converted_again() -> None:
    first = fp8()
    model = first.prepare(make())
    layer, weight = model.fc1, model.fc1.weight.detach().clone()
    second = fp8()
    model = second.prepare(model)
    assert model.fc1 is layer and torch.equal(model.fc1.weight, weight)
    assert [d.category for d in second.precision.conversion_report.layers][:2] == ["already converted"] * 2


@pytest.mark.parametrize("order", ["together", "optimizer first", "model first"])
def test_the_optimizer_may_be_prepared_before_with_or_after_the_model(order: str) -> None:
    accelerator, model = fp8(), make()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    if order == "together":
        model, optimizer = accelerator.prepare(model, optimizer)
    elif order == "optimizer first":
        optimizer = accelerator.prepare(optimizer)
        model = accelerator.prepare(model)
    else:
        model = accelerator.prepare(model)
        optimizer = accelerator.prepare(optimizer)
    before = model.fc1.weight.detach().clone()
    losses = train(accelerator, model, optimizer, 10)
    assert losses[-1] < losses[0]
    assert not torch.equal(model.fc1.weight, before)
    assert optimizer.state[model.fc1.weight]["exp_avg"].dtype == torch.float32


def test_exclude_modules_keeps_layers_in_high_precision_and_a_pattern_matches_whole_names() -> None:
    class Wrapper(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = make()

    accelerator = fp8(exclude_modules=["*fc2"])
    model = accelerator.prepare(Wrapper())
    assert isinstance(model.model.fc1, Float8Linear) and type(model.model.fc2) is nn.Linear
    assert "excluded by pattern '*fc2'" in str(accelerator.precision.conversion_report)
    with pytest.warns(UserWarning, match=r"'fc2' does not match 'model.fc2'; write '\*fc2'"):
        fp8(exclude_modules=["fc2"]).prepare(Wrapper())


def test_a_model_with_no_eligible_linear_raises_listing_each_layer_and_why() -> None:
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3))
    with pytest.raises(ValueError, match="found no linear layer") as error:
        fp8().prepare(model)
    assert "0 (10 -> 32): skipped: in_features 10 is not a multiple of 16" in str(error.value)
    assert "2 (32 -> 3): skipped: out_features 3 is not a multiple of 16" in str(error.value)


def test_tied_weights_keep_float32_storage() -> None:
    model = nn.Sequential(nn.Embedding(32, 32), nn.Linear(32, 32, bias=False), nn.Linear(32, 32))
    model[1].weight = model[0].weight
    accelerator = fp8(optimization_level="O1")
    model = accelerator.prepare(model)
    assert model[0].weight.dtype == torch.float32 and model[1].compact is None
    assert model[2].weight.dtype == torch.float16 and set(accelerator.precision.compact_parameters) == {"2.weight", "2.bias"}


# --------------------------------------------------------------------------- reading parameters
def test_the_default_recipe_leaves_parameters_as_they_are() -> None:
    """TransformerEngine's default: FP8 in the GEMMs only; parameters, gradients and optimizer state untouched."""
    accelerator = fp8()
    model = make()
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-2))
    assert accelerator.precision.level is None and accelerator.precision.compact_parameters == {}
    assert isinstance(model.fc1, Float8Linear) and all(p.dtype == torch.float32 for p in model.parameters())
    losses = train(accelerator, model, optimizer, 20)
    assert losses[-1] < 0.5 * losses[0]
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())
    state = accelerator.get_state_dict(model)
    assert all(torch.equal(p.detach(), state[name]) for name, p in model.named_parameters())
    assert accelerator.precision.describe() == "fp8 (native, delayed scaling, base fp32)"


@pytest.mark.parametrize("level", ["O1", "O2"])
def test_o1_o2_parameters_read_and_write_their_real_values(level: str) -> None:
    """What a script reads through parameters() (an EMA, a weight norm) is the weight's value, and what it
    writes there (EMA's copy_to, a hand-written decay) is what the layer computes with."""
    accelerator, model, optimizer = prepared(level)
    train(accelerator, model, optimizer, 3)
    state = accelerator.get_state_dict(model)
    assert model.fc1.weight.dtype == torch.float16
    for name, param in accelerator.unwrap_model(model).named_parameters():
        assert torch.equal(param.detach().float(), state[name]), name
    checksum = sum(p.detach().float().sum() for p in model.parameters())
    assert checksum == pytest.approx(sum(v.sum() for v in state.values()).item(), rel=1e-6)
    reference = make()
    with torch.no_grad():
        for name, param in model.named_parameters():
            new = torch.randn_like(param, dtype=torch.float32) * 0.05
            param.copy_(new)  # as diffusers' EMAModel.copy_to writes into param.data
            getattr(reference, name.split(".")[0]).get_parameter(name.split(".")[1]).copy_(param.float())
    state = accelerator.get_state_dict(model)
    assert all(torch.equal(state[name], v) for name, v in reference.state_dict().items())
    model.eval(), reference.eval()
    tokens, _ = data()
    torch.testing.assert_close(model(tokens), reference(tokens))  # eval runs in high precision: the same weights


def test_a_weight_float16_cannot_hold_is_refused_when_o1_storage_is_made() -> None:
    model = make()
    with torch.no_grad():
        model.fc2.weight[3, 5] = 1e5
    with pytest.raises(ValueError, match=r"optimization_level='O1'.*fc2\.weight.*65504.*100000.*exclude_modules=\['fc2'\]"):
        fp8(optimization_level="O1").prepare(model)
    assert fp8().prepare(make()).fc2.weight.dtype == torch.float32  # the default stores nothing: no limit


# --------------------------------------------------------------------------- eval, statistics, files
@pytest.mark.parametrize("fp8_in_eval", [False, True])
def test_eval_runs_in_high_precision_unless_asked(fp8_in_eval: bool) -> None:
    accelerator, model, optimizer = prepared(use_autocast_during_eval=fp8_in_eval)
    train(accelerator, model, optimizer, 2)
    reference = make(seed=1)
    reference.load_state_dict(accelerator.get_state_dict(model))
    tokens, _ = data(seed=1)
    model.eval()
    with torch.no_grad():
        gap = (model(tokens) - reference(tokens)).abs().max().item()
    assert (gap > 1e-3) if fp8_in_eval else (gap < 1e-5)
    model.train()
    model(tokens)
    assert model.fc1.enabled


def test_per_layer_statistics_are_readable() -> None:
    """amax and scale at every step; the saturated/flushed counts only where FP8 health counts them."""
    accelerator, model, optimizer = prepared()
    train(accelerator, model, optimizer, 2)
    stats = accelerator.precision.fp8_stats()
    for role in ("input", "weight", "grad_output"):
        entry = stats[f"fc1.{role}"]
        assert entry["amax"] > 0 and entry["scale"] > 0 and "saturated" not in entry and "flushed" not in entry
    assert stats["fc1.weight_grad"]["amax"] > 0 and stats["fc2.bias_grad"]["scale"] > 0
    assert accelerator.step_stats == {"skipped_steps": 0}


@pytest.mark.filterwarnings("ignore:FP8 health at optimizer step")
def test_saturated_and_flushed_are_counted_on_the_health_steps_only() -> None:
    """Counting costs passes over every tensor: on during every health_interval-th step only, and the
    counts of the last counted step stay readable in between; the amax is recorded at every step."""
    accelerator, model, optimizer = prepared(margin=0, health_interval=3)
    scaler = model.fc1.input_scaler
    counting, amaxes, counted = [], [], []
    for _ in range(7):
        counting.append(scaler.count_stats)
        train(accelerator, model, optimizer, 1)
        amaxes.append(float(scaler.last_amax))
        counted.append("saturated" in accelerator.precision.fp8_stats()["fc1.input"])
    assert counting == [False, False, True, False, False, True, False]
    assert counted == [False, False, True, True, True, True, True]
    assert all(a > 0 for a in amaxes) and len(set(amaxes)) > 1


def test_the_state_dict_has_original_names_and_values_and_loads_strictly(tmp_path: Path) -> None:
    accelerator, model, optimizer = prepared()
    train(accelerator, model, optimizer, 3)
    state = accelerator.get_state_dict(model)
    assert set(state) == set(make().state_dict()) and all(v.dtype == torch.float32 for v in state.values())
    assert torch.equal(state["fc1.weight"], model.fc1.weight.float())  # the storage is the real values
    make(seed=3).load_state_dict(state, strict=True)
    accelerator.save_model(model, tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    assert all(torch.equal(saved[name], value) for name, value in state.items())


@pytest.mark.parametrize("level", ["O1", "O2"])
def test_save_state_and_load_state_restore_the_fp8_state_exactly(level: str, tmp_path: Path) -> None:
    """Resume mid-window: FP8 gradients, scaling, rounding generator, storage and moments come back."""

    def setup() -> tuple[Accelerator, Net, Any, Any]:
        accelerator = Accelerator(
            mixed_precision="fp8", gradient_accumulation_steps=2,
            kwarg_handlers=[FP8RecipeKwargs(backend="native", optimization_level=level, amax_history_len=4)],
        )
        model = make()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 / (1 + step))
        return accelerator, *accelerator.prepare(model, optimizer, scheduler)

    def micro_batches(accelerator: Accelerator, model: Net, optimizer: Any, scheduler: Any, seeds: range) -> None:
        for seed in seeds:
            tokens, labels = data(seed, batch=32)
            with accelerator.accumulate(model):
                accelerator.backward(nn.functional.cross_entropy(model(tokens), labels))
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()

    accelerator, model, optimizer, scheduler = setup()
    micro_batches(accelerator, model, optimizer, scheduler, range(5))
    accelerator.save_state(tmp_path / "ckpt")
    micro_batches(accelerator, model, optimizer, scheduler, range(5, 9))
    again, model2, optimizer2, scheduler2 = setup()
    again.load_state(tmp_path / "ckpt")
    micro_batches(again, model2, optimizer2, scheduler2, range(5, 9))
    assert same_bits(storage_snapshot(model, optimizer), storage_snapshot(model2, optimizer2))
    for name, value in accelerator.precision.state_dict()["scaling"].items():
        assert torch.equal(value, again.precision.state_dict()["scaling"][name]), name


# --------------------------------------------------------------------------- recipes and levels
@pytest.mark.parametrize("fp8_format", ["HYBRID", "E4M3"])
@pytest.mark.parametrize("scaling", ["delayed", "current"])
def test_formats_and_scalings_train(fp8_format: str, scaling: str) -> None:
    accelerator, model, optimizer = prepared(fp8_format=fp8_format, scaling=scaling)
    losses = train(accelerator, model, optimizer, 25)
    assert losses[-1] < 0.5 * losses[0]
    expected = torch.float8_e5m2 if fp8_format == "HYBRID" else torch.float8_e4m3fn
    assert model.fc1.grad_scaler.dtype == expected and model.fc1.grad_scaler.scaling == scaling


@pytest.mark.parametrize("level", ["O1", "O2"])
def test_levels_store_what_they_promise_and_train_like_fp32(level: str) -> None:
    accelerator, model, optimizer = prepared(level)
    reference = make()
    plain = Accelerator()
    reference, reference_optimizer = plain.prepare(reference, torch.optim.AdamW(reference.parameters(), lr=1e-2))
    losses = train(accelerator, model, optimizer, 40)
    reference_losses = train(plain, reference, reference_optimizer, 40)
    assert abs(losses[-1] - reference_losses[-1]) < 0.1 * reference_losses[0]
    tokens, labels = data()
    accelerator.backward(nn.functional.cross_entropy(model(tokens), labels))
    weight = model.fc1.weight
    assert weight.dtype == torch.float16 and weight.grad is None
    assert model.fc1.compact.weight.grad.data.dtype == torch.float8_e4m3fn
    assert model.embed.weight.dtype == torch.float32 and model.embed.weight.grad is not None
    state = optimizer.state[weight]
    if level == "O1":
        assert {k: v.dtype for k, v in state.items()} == {"step": torch.float32, "exp_avg": torch.float32, "exp_avg_sq": torch.float32}
    else:
        assert state["exp_avg_ratio"].dtype == torch.float8_e4m3fn and state["exp_avg_sq_sqrt"].dtype == torch.float16
        assert optimizer.state[model.embed.weight]["exp_avg"].dtype == torch.float32


def test_clipping_sees_the_fp8_gradients_in_float32() -> None:
    accelerator, model, optimizer = prepared()
    tokens, labels = data()
    accelerator.backward(nn.functional.cross_entropy(model(tokens), labels))
    fp8_grad = model.fc1.compact.weight.grad.dequantize()
    norm = accelerator.clip_grad_norm_(model.parameters(), 1e-3)
    assert model.fc1.weight.dtype == torch.float32 and model.fc1.weight.grad is not None
    assert math.isclose(model.fc1.weight.grad.norm().item(), fp8_grad.norm().item() * 1e-3 / norm.item(), rel_tol=1e-5)
    optimizer.step()
    assert model.fc1.weight.dtype == torch.float16 and model.fc1.weight.grad is None


def test_o1_works_with_any_optimizer_and_o2_refuses_others_naming_o1() -> None:
    accelerator, model = fp8(), make()
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    losses = train(accelerator, model, optimizer, 15)
    assert losses[-1] < losses[0]
    model = make()
    with pytest.raises(ValueError, match="optimization_level='O2'.*SGD.*optimization_level='O1', which works with any"):
        fp8(optimization_level="O2").prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="amsgrad=True"):
        fp8(optimization_level="O2").prepare(torch.optim.Adam(make().parameters(), amsgrad=True))


def test_accumulated_fp8_gradients_are_as_close_to_fp32_as_one_large_batch() -> None:
    """Accumulation re-rounds the running FP8 sum once per micro-batch: its error stays that of FP8."""

    def fp8_gradient(micro_batches: int) -> tuple[torch.Tensor, torch.Tensor]:
        accelerator = Accelerator(mixed_precision="fp8", gradient_accumulation_steps=micro_batches,
                                  kwarg_handlers=[FP8RecipeKwargs(backend="native", scaling="current",
                                                                  optimization_level="O1")])
        model = accelerator.prepare(make())
        size = len(tokens) // micro_batches
        for chunk in range(micro_batches):
            with accelerator.accumulate(model):
                part = slice(size * chunk, size * (chunk + 1))
                accelerator.backward(nn.functional.cross_entropy(model(tokens[part]), labels[part]))
        reference = make()
        reference.load_state_dict(accelerator.get_state_dict(model))
        nn.functional.cross_entropy(reference(tokens), labels).backward()
        return model.fc1.compact.weight.grad.dequantize(), reference.fc1.weight.grad

    tokens, labels = data(batch=128)
    errors = {}
    for count in (1, 4):
        fp8_grad, fp32_grad = fp8_gradient(count)
        errors[count] = ((fp8_grad - fp32_grad).norm() / fp32_grad.norm()).item()
    assert errors[4] < 1.5 * errors[1] + 0.02, errors


# --------------------------------------------------------------------------- non-finite steps
@pytest.mark.parametrize("level", ["O1", "O2"])
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_activation_skips_the_step_and_is_counted(level: str, bad: float) -> None:
    accelerator, model = fp8(optimization_level=level), make()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 / (1 + step))
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    train(accelerator, model, optimizer, 2, scheduler)
    before, lr = storage_snapshot(model, optimizer), scheduler.get_last_lr()
    model.fc1.register_forward_pre_hook(lambda module, args: (args[0].clone().fill_(bad),))
    train(accelerator, model, optimizer, 1, scheduler)
    assert accelerator.optimizer_step_was_skipped and accelerator.step_stats == {"skipped_steps": 1}
    assert same_bits(before, storage_snapshot(model, optimizer)) and scheduler.get_last_lr() == lr
    assert model.fc1.weight.grad is None and model.fc1.compact.weight.grad.data is None


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("recipe", "error", "pattern"),
    [
        ({"fp8_format": "E5M2"}, ValueError, "E5M2.*not supported"),
        ({"fp8_format": "E3M4"}, ValueError, "fp8_format"),
        ({"margin": -1}, ValueError, "margin"),
        ({"amax_history_len": 0}, ValueError, "amax_history_len"),
        ({"amax_compute_algo": "mean"}, ValueError, "amax_compute_algo"),
        ({"optimization_level": "O3"}, ValueError, "optimization_level"),
        ({"scaling": "sometimes"}, ValueError, "scaling"),
        ({"exclude_modules": "head"}, TypeError, "exclude_modules"),
        ({"exclude_modules": ["head", 3]}, TypeError, "exclude_modules"),
    ],
)
def test_bad_recipe_values_raise_naming_the_field(recipe: dict[str, Any], error: type[Exception], pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        fp8(**recipe)


def test_a_scaling_the_native_backend_does_not_run_raises_at_construction() -> None:
    with pytest.raises(ValueError, match="scaling='rowwise'.*'native'.*'delayed', 'current'"):
        fp8(scaling="rowwise")


def test_an_explicit_optimization_level_is_honoured() -> None:
    assert fp8(optimization_level="O2").precision.level.name == "O2"
    assert fp8(optimization_level="O1").precision.level.name == "O1"


def test_optimizer_state_survives_a_weights_only_round_trip(tmp_path: Path) -> None:
    for level in ("O1", "O2"):
        accelerator, model, optimizer = prepared(level)
        train(accelerator, model, optimizer, 2)
        torch.save(optimizer.state_dict(), tmp_path / "optimizer.pt")
        fresh_accelerator, fresh_model, fresh_optimizer = prepared(level)
        fresh_optimizer.load_state_dict(torch.load(tmp_path / "optimizer.pt", weights_only=True))
        assert same_bits(optimizer_tensors(model, optimizer), optimizer_tensors(fresh_model, fresh_optimizer))



@pytest.mark.parametrize("level", ["O1", "O2"])
@pytest.mark.parametrize("clip", [False, True], ids=["plain", "clipped"])
def test_zero_grad_drops_the_fp8_gradients_as_torch_drops_param_grad(level: str, clip: bool) -> None:
    """backward, zero_grad() and no step: the next step sees only the gradients written after it."""
    def run(dropped_first: bool) -> list[torch.Tensor]:
        accelerator, model, optimizer = prepared(level)
        tokens, labels = data()
        if dropped_first:
            accelerator.backward(nn.functional.cross_entropy(model(tokens), (labels + 1) % 10) * 100)
            if clip:
                accelerator.clip_grad_norm_(model.parameters(), 1.0)  # materialises weights and gradients
            optimizer.zero_grad()
        accelerator.backward(nn.functional.cross_entropy(model(tokens), labels))
        optimizer.step()
        return [p.detach().clone() for p in model.parameters()]

    for kept, clean in zip(run(dropped_first=True), run(dropped_first=False), strict=True):
        assert torch.equal(kept, clean)
