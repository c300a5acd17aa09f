"""Converting a model's Linear layers, the report, and the state around the conversion."""

from __future__ import annotations

import functools
import io

import pytest
import torch
from torch import nn

from accel.backends.native_fp8.convert import (
    ConversionReport,
    convert_linears,
    float8_layers,
    fp8_state_dict,
    high_precision_state_dict,
    load_fp8_state_dict,
    scaler_group,
    set_fp8_enabled,
    unconvert_linears,
)
from accel.backends.native_fp8.linear import Float8Config, Float8Linear

make_layer = functools.partial(Float8Linear.from_linear, config=Float8Config(amax_history_len=8))


class TaggedLinear(nn.Linear):
    """A Linear subclass with nothing beyond weight and bias."""


class ScaledLinear(nn.Linear):
    """A Linear subclass with an extra parameter that conversion must not drop."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(in_features, out_features)
        self.gain = nn.Parameter(torch.ones(out_features))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(64, 64)
        self.inner = nn.Sequential(nn.Linear(64, 32), nn.GELU())


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(10, 64)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.tagged = TaggedLinear(32, 64)
        self.scaled = ScaledLinear(64, 64)
        self.lm_head = nn.Linear(64, 48)
        self.norm = nn.LayerNorm(64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block.inner(block.proj(h))
            h = self.tagged(h)
        return self.lm_head(self.norm(self.scaled(h)))


def net() -> Net:
    torch.manual_seed(0)
    return Net()


def decisions(report: ConversionReport) -> dict[str, tuple[str, str]]:
    return {d.name: (d.category, d.reason) for d in report.layers}


def test_report_lists_every_linear_with_its_reason() -> None:
    model = net()
    report = convert_linears(model, exclude_modules=("lm_head",), make_layer=make_layer)
    assert decisions(report) == {
        "embed": ("not a multiple of 16", "in_features 10 is not a multiple of 16"),
        "blocks.0.proj": ("converted", ""),
        "blocks.0.inner.0": ("converted", ""),
        "blocks.1.proj": ("converted", ""),
        "blocks.1.inner.0": ("converted", ""),
        "tagged": ("converted", ""),
        "scaled": (
            "with extra parameters",
            "ScaledLinear has gain beyond weight and bias, which the FP8 layer would drop",
        ),
        "lm_head": ("excluded", "excluded by pattern 'lm_head'"),
    }
    assert report.summary() == (
        "FP8: converted 5 of 8 Linear layers "
        "(skipped: 1 not a multiple of 16, 1 excluded, 1 with extra parameters)"
    )
    assert [(d.in_features, d.out_features) for d in report.layers][:3] == [(10, 64), (64, 64), (64, 32)]


def test_modules_are_replaced_in_place_nested_and_subclassed() -> None:
    model = net()
    convert_linears(model, exclude_modules=("lm_head",), make_layer=make_layer)
    assert isinstance(model.blocks[1].inner[0], Float8Linear)
    assert isinstance(model.tagged, Float8Linear)
    assert type(model.embed) is nn.Linear
    assert type(model.lm_head) is nn.Linear
    assert set(float8_layers(model)) == {
        "blocks.0.proj", "blocks.0.inner.0", "blocks.1.proj", "blocks.1.inner.0", "tagged"
    }


def test_wildcard_patterns_and_unmatched_patterns() -> None:
    model = net()
    report = convert_linears(
        model, exclude_modules=("blocks.*.proj", "lm_haed"), make_layer=make_layer
    )
    assert decisions(report)["blocks.1.proj"] == ("excluded", "excluded by pattern 'blocks.*.proj'")
    assert report.unmatched_patterns == ("lm_haed",)
    assert report.summary().endswith("; exclude patterns that matched no module: 'lm_haed'")


def test_misaligned_both_dims_reason() -> None:
    model = nn.Sequential(nn.Linear(10, 20))
    report = convert_linears(model, make_layer=make_layer)
    assert report.layers[0].reason == "in_features 10 and out_features 20 are not multiples of 16"


def test_parameters_are_the_same_objects_and_an_earlier_optimizer_still_trains() -> None:
    model = net()
    params = dict(model.named_parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    convert_linears(model, make_layer=make_layer)
    after = dict(model.named_parameters())
    assert list(after) == list(params)
    assert all(after[name] is params[name] for name in params)
    before = model.blocks[0].proj.weight.detach().clone()
    model(torch.randn(4, 10)).square().mean().backward()
    optimizer.step()
    assert not torch.equal(model.blocks[0].proj.weight, before)


def test_second_conversion_reports_already_converted() -> None:
    model = net()
    convert_linears(model, make_layer=make_layer)
    layer = model.tagged
    report = convert_linears(model, make_layer=make_layer)
    assert model.tagged is layer
    assert len(report.converted) == 0
    assert report.num_fp8 == 6
    assert decisions(report)["tagged"] == ("already converted", "already converted")
    assert "6 already converted" in report.summary()


def test_model_without_eligible_linear_reports_why() -> None:
    model = nn.Sequential(nn.Linear(10, 30), nn.ReLU(), nn.Linear(30, 5))
    report = convert_linears(model, make_layer=make_layer)
    assert report.num_fp8 == 0
    assert report.details() == (
        "FP8: converted 0 of 2 Linear layers (skipped: 2 not a multiple of 16)\n"
        "  0 (10 -> 30): skipped: in_features 10 and out_features 30 are not multiples of 16\n"
        "  2 (30 -> 5): skipped: in_features 30 and out_features 5 are not multiples of 16"
    )


def test_model_without_any_linear() -> None:
    report = convert_linears(nn.Sequential(nn.ReLU()), make_layer=make_layer)
    assert report.summary() == "FP8: converted 0 of 0 Linear layers (the model has no nn.Linear)"


def test_the_model_itself_being_a_linear_is_skipped_with_advice() -> None:
    report = convert_linears(nn.Linear(32, 32), make_layer=make_layer)
    assert report.layers[0].category == "root module"
    assert "nn.Sequential(model)" in report.layers[0].reason


def test_multihead_attention_out_proj_is_skipped_because_it_never_runs() -> None:
    model = nn.Sequential(nn.MultiheadAttention(32, 4), nn.Linear(32, 32))
    report = convert_linears(model, make_layer=make_layer)
    assert decisions(report)["0.out_proj"][0] == "inside MultiheadAttention"
    assert decisions(report)["1"] == ("converted", "")
    assert report.summary() == (
        "FP8: converted 1 of 2 Linear layers (skipped: 1 inside MultiheadAttention); "
        "weight matrices outside FP8: 1 MultiheadAttention"
    )
    (held,) = report.others
    assert (held.name, held.parameter, held.shape) == ("0", "in_proj_weight", (96, 32))
    assert "F.multi_head_attention_forward" in held.reason


def test_a_module_shared_under_two_names_is_replaced_under_both() -> None:
    shared = nn.Linear(32, 32)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    report = convert_linears(model, make_layer=make_layer)
    assert len(report.layers) == 1
    assert model[0] is model[2] and isinstance(model[0], Float8Linear)


def test_subclass_with_own_forward_is_converted_with_a_note() -> None:
    class Doubling(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return 2 * super().forward(x)

    report = convert_linears(nn.Sequential(Doubling(32, 32)), make_layer=make_layer)
    assert report.layers[0].converted
    assert report.layers[0].reason == "Doubling.forward is replaced by the FP8 GEMM"


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"exclude_modules": "lm_head"}, r"exclude_modules='lm_head' is not supported; accepted: a tuple"),
        ({"make_layer": None}, r"make_layer=None is not supported"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], pattern: str) -> None:
    arguments: dict[str, object] = {"make_layer": make_layer, **kwargs}
    with pytest.raises(ValueError, match=pattern):
        convert_linears(net(), **arguments)  # type: ignore[arg-type]


def test_state_dict_loads_strictly_into_the_unconverted_model() -> None:
    model = net()
    convert_linears(model, make_layer=make_layer)
    model(torch.randn(4, 10))
    state = high_precision_state_dict(model)
    assert state.keys() == net().state_dict().keys()
    assert all(v.dtype == torch.float32 for v in state.values())
    fresh = Net()
    fresh.load_state_dict(state, strict=True)
    for name, value in fresh.state_dict().items():
        assert torch.equal(value, state[name])


def roundtrip(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded: dict[str, torch.Tensor] = torch.load(buffer, weights_only=True)
    return loaded


def train_steps(model: nn.Module, steps: int) -> None:
    group = scaler_group(model)
    for index in range(steps):
        torch.manual_seed(100 + index)
        model(torch.randn(8, 10)).square().mean().backward()
        group.update()


def test_fp8_state_roundtrips_exactly_and_resumes_identically() -> None:
    model = net()
    convert_linears(model, make_layer=make_layer)
    train_steps(model, 3)
    state = fp8_state_dict(model)
    assert "blocks.0.inner.0.grad_output.amax_history" in state
    assert all(isinstance(v, torch.Tensor) for v in state.values())

    other = net()
    convert_linears(other, make_layer=make_layer)
    load_fp8_state_dict(other, roundtrip(state))
    for key, value in fp8_state_dict(other).items():
        assert torch.equal(value, state[key]), key
    x = torch.randn(4, 10)
    assert torch.equal(model(x), other(x))


def test_loading_fp8_state_into_a_differently_converted_model_fails_clearly() -> None:
    model = net()
    convert_linears(model, make_layer=make_layer)
    other = net()
    convert_linears(other, exclude_modules=("tagged",), make_layer=make_layer)
    with pytest.raises(ValueError, match=r"unexpected keys \['tagged.grad_output"):
        load_fp8_state_dict(other, fp8_state_dict(model))


def test_scaler_group_names_and_nonfinite() -> None:
    model = nn.Sequential(nn.Linear(16, 16))
    convert_linears(model, make_layer=make_layer)
    group = scaler_group(model)
    assert list(group) == ["0.input", "0.weight", "0.grad_output"]
    model(torch.full((2, 16), float("nan")))
    assert group.found_nonfinite().item() is True


def test_unconvert_restores_the_original_modules() -> None:
    model = net()
    originals = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    params = dict(model.named_parameters())
    convert_linears(model, make_layer=make_layer)
    assert unconvert_linears(model) == 6
    assert not float8_layers(model)
    assert model.tagged is originals["tagged"] and type(model.tagged) is TaggedLinear
    assert all(p is params[name] for name, p in model.named_parameters())


def test_set_fp8_enabled() -> None:
    model = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 16))
    convert_linears(model, make_layer=make_layer)
    assert set_fp8_enabled(model, False) == 2
    assert not model[0].enabled and not model[1].enabled
    x = torch.randn(3, 16)
    assert torch.equal(model(x), model[1].to_linear()(model[0].to_linear()(x)))
