"""Mixed precision steps float32 masters: a model that arrives in 16 bits is made float32 at prepare
(the same Parameters), frozen ones stay, and an optimizer whose 16-bit state could not follow is refused."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from accel import Accelerator, FP8RecipeKwargs
from accel import _warnings as _warnings_module
from accel._warnings import PrecisionWarning
from accel.backends.masters import UpcastParameter

MIXED = [("bf16", torch.bfloat16), ("fp16", torch.float16)]


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees warn_once's warnings afresh."""
    monkeypatch.setattr(_warnings_module, "_given", set())


def _model(dtype: torch.dtype) -> nn.Sequential:
    """Linear(4, 4) frozen (a LoRA base), Linear(4, 2) trainable, all in `dtype`."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)).to(dtype)
    model[0].requires_grad_(False)
    return model


def _step(accelerator: Accelerator, model: nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.dtype]:
    """One training step; returns the dtypes the Linear layers computed in."""
    seen: list[torch.dtype] = []
    handles = [m.register_forward_hook(lambda m, i, o: seen.append(o.dtype)) for m in model.modules() if isinstance(m, nn.Linear)]
    loss = model(torch.randn(3, 4)).square().mean()
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    for handle in handles:
        handle.remove()
    return seen


@pytest.mark.parametrize(("precision", "dtype"), MIXED)
def test_16_bit_model_steps_float32_masters_with_an_optimizer_built_before_prepare(
    precision: str, dtype: torch.dtype
) -> None:
    model = _model(dtype)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.1)
    before = [p for p in model.parameters()]
    values = model[2].weight.detach().float().clone()
    accelerator = Accelerator(mixed_precision=precision)
    with pytest.warns(PrecisionWarning, match=rf"prepare made 2 trainable {dtype} parameter\(s\) \(10 values\) float32"):
        prepared, prepared_optimizer = accelerator.prepare(model, optimizer)
    assert [p for p in prepared.parameters()] == before  # the same Parameter objects
    assert [p.dtype for p in prepared.parameters()] == [dtype, dtype, torch.float32, torch.float32]
    assert accelerator.precision.upcast_parameters == (UpcastParameter("2.weight", dtype, 8), UpcastParameter("2.bias", dtype, 2))
    computed = _step(accelerator, prepared, prepared_optimizer)
    assert computed == [dtype, dtype]  # the products still run in 16 bits, under autocast
    assert not torch.equal(model[2].weight.detach(), values)  # the optimizer built before prepare stepped them
    state = optimizer.state[model[2].weight]
    assert state["exp_avg"].dtype == state["exp_avg_sq"].dtype == torch.float32
    assert model[0].weight.dtype == dtype and model[0].weight.grad is None  # frozen: as given


def test_an_existing_gradient_is_made_float32_with_its_parameter() -> None:
    model = nn.Linear(2, 1).to(torch.bfloat16)
    model(torch.ones(1, 2, dtype=torch.bfloat16)).sum().backward()
    gradient = model.weight.grad.clone()
    with pytest.warns(PrecisionWarning):
        Accelerator(mixed_precision="bf16").prepare(model)
    assert model.weight.grad.dtype == torch.float32 and torch.equal(model.weight.grad, gradient.float())


@pytest.mark.parametrize(
    ("precision", "dtype", "true"), [("bf16", torch.bfloat16, "bf16-true"), ("fp16", torch.float16, "16-true")]
)
def test_an_optimizer_with_16_bit_state_is_refused_before_anything_changes(precision: str, dtype: torch.dtype, true: str) -> None:
    model = nn.Linear(4, 2).to(dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(3, 4, dtype=dtype)).sum().backward()
    optimizer.step()  # momentum buffers in `dtype`
    accelerator = Accelerator(mixed_precision=precision)
    message = rf"SGD already holds {dtype} state \('momentum_buffer'\) for 2 of them \(first: 'weight'\).*"
    message += f"mixed_precision='{true}'"
    with pytest.raises(ValueError, match=message):
        accelerator.prepare(model, optimizer)
    assert model.weight.dtype == dtype  # nothing changed
    assert not accelerator.prepared.models and not accelerator.prepared.optimizers


def test_an_optimizer_that_makes_its_state_when_built_is_refused() -> None:
    model = nn.Linear(4, 2).to(torch.bfloat16)
    optimizer = torch.optim.Adagrad(model.parameters())  # state "sum" made here, in bf16
    with pytest.raises(ValueError, match=r"Adagrad already holds torch.bfloat16 state \('sum'\).*after prepare\(model\)"):
        Accelerator(mixed_precision="bf16").prepare(model, optimizer)


def test_a_stateful_optimizer_prepared_before_its_model_is_refused_at_the_model() -> None:
    model = nn.Linear(4, 2).to(torch.bfloat16)
    optimizer = torch.optim.Adagrad(model.parameters())
    accelerator = Accelerator(mixed_precision="bf16")
    accelerator.prepare(optimizer)
    with pytest.raises(ValueError, match="Adagrad already holds torch.bfloat16 state"):
        accelerator.prepare_model(model)
    assert model.weight.dtype == torch.bfloat16


def test_a_stateful_optimizer_prepared_after_its_model_is_refused_at_the_optimizer() -> None:
    model = nn.Linear(4, 2).to(torch.bfloat16)
    optimizer = torch.optim.Adagrad(model.parameters())
    accelerator = Accelerator(mixed_precision="bf16")
    with pytest.warns(PrecisionWarning):
        accelerator.prepare(model)
    with pytest.raises(ValueError, match=r"so it made the model's trainable torch.bfloat16 parameters float32.*'sum'"):
        accelerator.prepare(optimizer)


def test_optimizer_then_model_in_separate_calls_steps_the_masters() -> None:
    model = nn.Linear(4, 2).to(torch.bfloat16)
    accelerator = Accelerator(mixed_precision="bf16")
    optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=0.1))
    with pytest.warns(PrecisionWarning):
        model = accelerator.prepare(model)
    before = model.weight.detach().clone()
    _step(accelerator, model, optimizer)
    assert model.weight.dtype == torch.float32 and not torch.equal(model.weight.detach(), before)
    assert optimizer.state[model.weight]["exp_avg"].dtype == torch.float32


@pytest.mark.parametrize(
    ("precision", "dtype"), [("bf16-true", torch.bfloat16), ("16-true", torch.float16), ("no", torch.bfloat16)]
)
def test_true_precisions_and_fp32_do_not_upcast(precision: str, dtype: torch.dtype) -> None:
    model = nn.Linear(4, 2).to(dtype)
    accelerator = Accelerator(mixed_precision=precision)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionWarning)
        model = accelerator.prepare(model)
    assert model.weight.dtype == dtype
    assert accelerator.precision.upcast_parameters == ()


def test_a_model_prepared_for_evaluation_only_keeps_its_dtype() -> None:
    model = nn.Linear(4, 2).to(torch.bfloat16)
    accelerator = Accelerator(mixed_precision="bf16")
    model = accelerator.prepare_model(model, evaluation_mode=True)
    assert model.weight.dtype == torch.bfloat16 and model(torch.randn(1, 4)).dtype == torch.float32


def test_a_compiled_model_gets_float32_masters() -> None:
    model = nn.Linear(4, 2).to(torch.bfloat16)
    compiled = torch.compile(model, backend="eager")
    compiled(torch.randn(1, 4, dtype=torch.bfloat16))  # compiled for bf16 weights first
    accelerator = Accelerator(mixed_precision="bf16")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(PrecisionWarning, match="prepare made 2 trainable"):
        prepared, optimizer = accelerator.prepare(compiled, optimizer)
    assert model.weight.dtype == torch.float32
    before = model.weight.detach().clone()
    _step(accelerator, prepared, optimizer)
    assert not torch.equal(model.weight.detach(), before)


def test_fp8_over_a_bf16_base_converts_the_float32_masters() -> None:
    """The FP8 conversion sees float32 weights, as for a model built in float32 (the same storage and values)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 16)).to(torch.bfloat16)
    reference = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 16))
    reference.load_state_dict(model.float().state_dict())
    model.to(torch.bfloat16)

    def fp8() -> Accelerator:
        return Accelerator(mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(backend="native")])

    accelerator = fp8()
    with pytest.warns(PrecisionWarning, match="mixed_precision='fp8' steps float32 master weights.*base_precision='bf16-true'"):
        model = accelerator.prepare(model)
    assert [(r.name, r.dtype) for r in accelerator.precision.upcast_parameters] == [
        (name, torch.bfloat16) for name in ("0.weight", "0.bias", "1.weight", "1.bias")
    ]
    reference = fp8().prepare(reference)
    for (name, mine), (_, theirs) in zip(model.named_parameters(), reference.named_parameters(), strict=True):
        assert mine.dtype == theirs.dtype and torch.equal(mine, theirs), name


def test_fp8_refusal_names_the_true_base_precision() -> None:
    model = nn.Linear(16, 16).to(torch.bfloat16)
    optimizer = torch.optim.Adagrad(model.parameters())
    accelerator = Accelerator(mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(backend="native")])
    with pytest.raises(ValueError, match=r"FP8RecipeKwargs\(base_precision='bf16-true'\)"):
        accelerator.prepare(model, optimizer)


def test_a_bf16_transformers_model_with_lora_trains_float32_adapters_over_its_frozen_bf16_base() -> None:
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    config = transformers.LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=16,
    )
    torch.manual_seed(0)
    base = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    assert base.model.layers[0].self_attn.q_proj.weight.dtype == torch.bfloat16
    lora = peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    # peft makes its adapters float32 itself by default; without that they are bf16 like the base, as
    # peft's own autocast_adapter_dtype=False or an older peft leaves them
    model = peft.get_peft_model(base, lora, autocast_adapter_dtype=False)
    adapters = {name: p for name, p in model.named_parameters() if p.requires_grad}
    assert len(adapters) == 4 and all(p.dtype == torch.bfloat16 for p in adapters.values())
    optimizer = torch.optim.AdamW(adapters.values(), lr=1e-2)
    accelerator = Accelerator(mixed_precision="bf16")
    with pytest.warns(PrecisionWarning, match=r"prepare made 4 trainable torch.bfloat16 parameter\(s\)"):
        model, optimizer = accelerator.prepare(model, optimizer)
    for name, param in model.named_parameters():
        expected = torch.float32 if name in adapters else torch.bfloat16
        assert param.dtype == expected, name
    before = {name: p.detach().clone() for name, p in adapters.items()}
    ids = torch.randint(0, 32, (2, 8))
    loss = model(input_ids=ids, labels=ids).loss
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    accelerator.backward(loss)
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in adapters.values())
    optimizer.step()
    assert all(not torch.equal(p.detach(), before[name]) for name, p in adapters.items())
