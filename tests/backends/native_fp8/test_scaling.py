"""Per-tensor scaling: the scale math checked exactly against hand computation."""

from __future__ import annotations

import io
import math

import pytest
import torch

from accel.backends.native_fp8.formats import E4M3, E5M2, cast_to_fp8
from accel.backends.native_fp8.scaler_group import ScalerGroup
from accel.backends.native_fp8.scaling import (
    FP32_MAX,
    TensorScaler,
    compute_scale,
    tensor_amax,
)


def t(value: float) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.float32)


def inv(scale: float) -> float:
    """The float32 reciprocal of a scale: what quantize() returns for it."""
    return t(scale).reciprocal().item()


def step(scaler: TensorScaler, amax: float) -> float:
    """Cast a tensor whose amax is ``amax``, end the step; returns the cast's scale_inv."""
    _, scale_inv = scaler.quantize(torch.tensor([amax / 2, -amax]))
    scaler.update()
    return scale_inv.item()


# compute_scale -----------------------------------------------------------------------------


def test_compute_scale_formula_with_margin() -> None:
    assert compute_scale(t(2.0), t(1.0), 448.0, 0).item() == 224.0
    assert compute_scale(t(2.0), t(1.0), 448.0, 1).item() == 112.0
    assert compute_scale(t(7.0), t(1.0), 57344.0, 3).item() == 57344.0 / 7.0 / 8.0


@pytest.mark.parametrize("amax", [0.0, math.nan, math.inf, -math.inf])
def test_compute_scale_keeps_previous_when_amax_is_zero_or_not_finite(amax: float) -> None:
    assert compute_scale(t(amax), t(5.5), 448.0, 0).item() == 5.5


def test_compute_scale_overflow_becomes_float32_max() -> None:
    assert compute_scale(t(1e-45), t(1.0), 448.0, 0).item() == FP32_MAX


def test_tensor_amax_one_pass_signs_nan_empty() -> None:
    assert tensor_amax(torch.tensor([1.0, -3.0, 2.0])).item() == 3.0
    assert tensor_amax(torch.tensor([-1.0, -0.5])).item() == 1.0
    assert tensor_amax(torch.tensor([1.0, math.inf])).item() == math.inf
    assert math.isnan(tensor_amax(torch.tensor([1.0, math.nan])).item())
    assert tensor_amax(torch.empty(0, 4)).item() == 0.0
    half = tensor_amax(torch.tensor([2.0, -4.0], dtype=torch.float16))
    assert half.dtype == torch.float32 and half.item() == 4.0


# delayed scaling ---------------------------------------------------------------------------


def test_delayed_history_window_max_algo() -> None:
    scaler = TensorScaler(E4M3, amax_history_len=3)
    # Step 1 has an empty history, so it casts with its own amax (448 / 2).
    assert step(scaler, 2.0) == inv(224.0)
    assert scaler.amax_history.tolist() == [2.0, 0.0, 0.0]
    assert scaler.scale.item() == 224.0
    # Later steps cast with the scale of the history *before* their own amax.
    assert step(scaler, 4.0) == inv(224.0)
    assert scaler.amax_history.tolist() == [4.0, 2.0, 0.0]
    assert scaler.scale.item() == 112.0
    assert step(scaler, 1.0) == inv(112.0)
    assert step(scaler, 0.5) == inv(112.0)  # 4 still in the window [0.5, 1, 4]
    assert scaler.amax_history.tolist() == [0.5, 1.0, 4.0]
    assert scaler.scale.item() == 112.0
    step(scaler, 0.5)  # 4 leaves the window [0.5, 0.5, 1]
    assert scaler.scale.item() == 448.0


def test_delayed_most_recent_algo() -> None:
    scaler = TensorScaler(E4M3, amax_history_len=4, amax_compute_algo="most_recent")
    step(scaler, 4.0)
    step(scaler, 1.0)
    assert scaler.scale.item() == 448.0
    assert scaler.amax_history.tolist() == [1.0, 4.0, 0.0, 0.0]


def test_delayed_margin() -> None:
    scaler = TensorScaler(E5M2, margin=2)
    step(scaler, 8.0)
    assert scaler.scale.item() == 57344.0 / 8.0 / 4.0


def test_zero_amax_step_keeps_the_previous_scale() -> None:
    scaler = TensorScaler(E4M3, amax_history_len=2, amax_compute_algo="most_recent")
    step(scaler, 2.0)
    scaler.update()  # a step in which the layer did not run: amax 0 is recorded
    assert scaler.amax_history.tolist() == [0.0, 2.0]
    assert scaler.scale.item() == 224.0


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_step_is_flagged_and_leaves_history_and_scale(bad: float) -> None:
    scaler = TensorScaler(E4M3, amax_history_len=3)
    step(scaler, 2.0)
    scaler.quantize(torch.tensor([1.0, bad]))
    assert scaler.found_nonfinite().item() is True
    scaler.update()
    assert scaler.amax_history.tolist() == [2.0, 0.0, 0.0]
    assert scaler.scale.item() == 224.0
    assert scaler.found_nonfinite().item() is False


def test_several_casts_in_one_step_record_the_largest_amax() -> None:
    scaler = TensorScaler(E4M3, amax_history_len=2)
    scaler.quantize(torch.tensor([3.0]))
    scaler.quantize(torch.tensor([-7.0]))
    scaler.quantize(torch.tensor([1.0]))
    assert scaler.step_amax.item() == 7.0
    scaler.update()
    assert scaler.amax_history.tolist() == [7.0, 0.0]
    assert scaler.step_amax.item() == 0.0


def test_quantize_returns_the_cast_with_its_scale_and_the_inverse() -> None:
    scaler = TensorScaler(E4M3)
    step(scaler, 2.0)  # scale 224 from now on
    x = torch.tensor([1.0, -3.0, 0.01])
    q, scale_inv = scaler.quantize(x)
    assert scale_inv.item() == inv(224.0)
    assert torch.equal(q.view(torch.uint8), cast_to_fp8(x, t(224.0), E4M3).view(torch.uint8))
    assert q[1].float().item() == -448.0  # saturated: the delayed scale predates this amax


def test_returned_scale_inv_is_a_snapshot() -> None:
    scaler = TensorScaler(E4M3)
    _, first = scaler.quantize(torch.tensor([2.0]))
    scaler.update()
    step(scaler, 8.0)
    assert first.item() == inv(224.0)


# current scaling ---------------------------------------------------------------------------


def test_current_scaling_uses_each_tensors_own_amax() -> None:
    scaler = TensorScaler(E4M3, scaling="current")
    _, scale_inv = scaler.quantize(torch.tensor([2.0, -1.0]))
    assert scale_inv.item() == inv(224.0)
    q, scale_inv = scaler.quantize(torch.tensor([8.0, 1.0]))
    assert scale_inv.item() == inv(56.0)
    assert q.float().tolist() == [448.0, 56.0]


def test_current_scaling_keeps_previous_scale_for_all_zero_tensor() -> None:
    scaler = TensorScaler(E5M2, scaling="current")
    scaler.quantize(torch.tensor([4.0]))
    q, scale_inv = scaler.quantize(torch.zeros(3))
    assert scale_inv.item() == inv(57344.0 / 4.0)
    assert q.float().tolist() == [0.0, 0.0, 0.0]


def test_current_scaling_still_records_history_and_nonfinite() -> None:
    scaler = TensorScaler(E4M3, scaling="current", amax_history_len=2)
    scaler.quantize(torch.tensor([3.0]))
    scaler.update()
    assert scaler.amax_history.tolist() == [3.0, 0.0]
    scaler.quantize(torch.tensor([math.inf]))
    assert scaler.found_nonfinite().item() is True


# statistics --------------------------------------------------------------------------------


def test_counts_of_saturated_and_flushed_values() -> None:
    scaler = TensorScaler(E4M3, count_stats=True)
    step(scaler, 1.0)  # scale 448
    scaler.quantize(torch.tensor([2.0, 0.5, 1e-9, 0.0, -3.0]))
    scaler.update()
    stats = scaler.last_stats()
    assert stats["saturated"].item() == 2  # 2 * 448 and 3 * 448 exceed 448
    assert stats["flushed"].item() == 1  # 1e-9 * 448 is below E4M3's smallest subnormal
    assert stats["amax"].item() == 3.0
    assert torch.equal(stats["scale"], t(448.0) / t(3.0))


def test_counting_is_off_by_default() -> None:
    scaler = TensorScaler(E4M3)
    step(scaler, 1.0)
    assert set(scaler.last_stats()) == {"amax", "scale"}


def test_hot_path_makes_no_python_side_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("a tensor value was read on the hot path")

    scalers = [TensorScaler(E4M3, count_stats=True), TensorScaler(E5M2, scaling="current")]
    monkeypatch.setattr(torch.Tensor, "item", forbidden)
    monkeypatch.setattr(torch.Tensor, "__bool__", forbidden)
    monkeypatch.setattr(torch.Tensor, "tolist", forbidden)
    for scaler in scalers:
        for _ in range(2):
            scaler.quantize(torch.randn(8))
            scaler.update()
        scaler.found_nonfinite()


# validation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"margin": -1}, r"margin=-1 is not supported; accepted: an int >= 0"),
        ({"margin": 1.5}, r"margin=1.5"),
        ({"amax_history_len": 0}, r"amax_history_len=0 is not supported; accepted: an int >= 1"),
        ({"amax_compute_algo": "maxx"}, r"amax_compute_algo='maxx'.*did you mean 'max'"),
        ({"scaling": "dynamic"}, r"scaling='dynamic' is not supported; accepted: \['delayed', 'current'\]"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs: dict[str, object], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        TensorScaler(E4M3, **kwargs)  # type: ignore[arg-type]


# checkpointing -----------------------------------------------------------------------------


def roundtrip(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded: dict[str, torch.Tensor] = torch.load(buffer, weights_only=True)
    return loaded


def test_state_dict_roundtrips_exactly_through_weights_only_load() -> None:
    scaler = TensorScaler(E4M3, amax_history_len=4, margin=1)
    for amax in (3.0, 0.7, 12.5):
        step(scaler, amax)
    scaler.quantize(torch.tensor([5.0]))  # a step in progress is saved too
    restored = TensorScaler(E4M3, amax_history_len=4, margin=1)
    restored.load_state_dict(roundtrip(scaler.state_dict()))
    for key, value in scaler.state_dict().items():
        assert torch.equal(restored.state_dict()[key], value), key
    x = torch.randn(64)
    assert torch.equal(scaler.quantize(x)[0].view(torch.uint8), restored.quantize(x)[0].view(torch.uint8))
    scaler.update()
    restored.update()
    assert torch.equal(scaler.scale, restored.scale)


def test_load_rejects_other_history_length() -> None:
    state = TensorScaler(E4M3, amax_history_len=4).state_dict()
    with pytest.raises(ValueError, match=r"amax_history_len=8, so the shape must be \(8,\)"):
        TensorScaler(E4M3, amax_history_len=8).load_state_dict(state)


def test_load_rejects_missing_keys() -> None:
    state = TensorScaler(E4M3).state_dict()
    del state["scale"]
    with pytest.raises(ValueError, match=r"expected exactly"):
        TensorScaler(E4M3).load_state_dict(state)


# group -------------------------------------------------------------------------------------


def test_group_update_nonfinite_stats_and_state() -> None:
    group = ScalerGroup({"fc.input": TensorScaler(E4M3), "fc.grad_output": TensorScaler(E5M2)})
    group["fc.input"].quantize(torch.tensor([2.0]))
    group["fc.grad_output"].quantize(torch.tensor([math.nan]))
    assert group.found_nonfinite().item() is True
    group.update()
    assert group.found_nonfinite().item() is False
    assert group.stats()["fc.input"]["scale"].item() == 224.0
    state = group.state_dict()
    assert sorted(state) == sorted(
        f"fc.{role}.{key}"
        for role in ("input", "grad_output")
        for key in ("amax_history", "scale", "calibrated", "step_amax")
    )
    other = ScalerGroup({"fc.input": TensorScaler(E4M3), "fc.grad_output": TensorScaler(E5M2)})
    other.load_state_dict(roundtrip(state))
    assert torch.equal(other["fc.input"].scale, group["fc.input"].scale)


def test_group_load_names_missing_and_unexpected_keys() -> None:
    group = ScalerGroup({"a.input": TensorScaler(E4M3)})
    state = {k.replace("a.", "b."): v for k, v in group.state_dict().items()}
    with pytest.raises(ValueError, match=r"missing keys \['a.input.amax_history'.*unexpected keys \['b.input"):
        group.load_state_dict(state)


def test_empty_group() -> None:
    group = ScalerGroup({})
    assert group.found_nonfinite().item() is False
    group.update()
    assert group.state_dict() == {}


def test_group_update_equals_each_scalers_own_update() -> None:
    """The group's stacked update gives every scaler exactly what its own update() would, for mixed
    formats, algorithms, margins and scaling modes, through zero, NaN and infinite amaxes."""

    def scalers() -> list[TensorScaler]:
        return [
            TensorScaler(E4M3, amax_history_len=4),
            TensorScaler(E5M2, amax_history_len=4, margin=2, amax_compute_algo="most_recent"),
            TensorScaler(E4M3, amax_history_len=4, scaling="current", count_stats=True),
            TensorScaler(E4M3, amax_history_len=3),  # another history length: its own batch
        ]

    grouped, alone = scalers(), scalers()
    group = ScalerGroup({str(i): s for i, s in enumerate(grouped)})
    generator = torch.Generator().manual_seed(0)
    for amaxes in ([0.0, 3.0, 1.0, 2.0], [5.0, math.nan, 0.5, 0.0], [1e-3, 70000.0, math.inf, 4.0], [2.0] * 4):
        for a, b, amax in zip(grouped, alone, amaxes):
            x = torch.randn(16, generator=generator) * amax
            a.quantize(x)
            b.quantize(x)
        group.update()
        for scaler in alone:
            scaler.update()
        for a, b in zip(grouped, alone):
            for key, value in b.state_dict().items():
                torch.testing.assert_close(a.state_dict()[key], value, rtol=0, atol=0, equal_nan=True, msg=key)
            torch.testing.assert_close(a.last_stats(), b.last_stats(), rtol=0, atol=0, equal_nan=True)
