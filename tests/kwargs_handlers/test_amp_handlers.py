"""GradScalerKwargs and AutocastKwargs: defaults, validation at construction, frozen."""

from __future__ import annotations

import dataclasses

import pytest

from accel import AutocastKwargs, GradScalerKwargs


def test_grad_scaler_defaults_are_torchs() -> None:
    handler = GradScalerKwargs()
    assert (handler.init_scale, handler.growth_factor, handler.backoff_factor) == (65536.0, 2.0, 0.5)
    assert (handler.growth_interval, handler.enabled) == (2000, True)
    assert handler.to_kwargs() == {}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("init_scale", 0, "must be > 0"),
        ("init_scale", -1.0, "must be > 0"),
        ("init_scale", float("inf"), "finite number"),
        ("growth_factor", 1.0, "must be > 1"),
        ("growth_factor", 0.5, "must be > 1"),
        ("backoff_factor", 1.0, r"must be in \(0, 1\)"),
        ("backoff_factor", 0.0, r"must be in \(0, 1\)"),
        ("backoff_factor", 1.5, r"must be in \(0, 1\)"),
        ("growth_interval", 0, "int >= 1"),
        ("growth_interval", 2.5, "must be an int"),
        ("enabled", "yes", "True or False"),
    ],
)
def test_grad_scaler_rejects_bad_values(field: str, value: object, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message) as info:
        GradScalerKwargs(**{field: value})
    assert f"GradScalerKwargs.{field}={value!r}" in str(info.value)


def test_handlers_are_frozen_and_keyword_only() -> None:
    handler = GradScalerKwargs(init_scale=1024)
    with pytest.raises(dataclasses.FrozenInstanceError):
        handler.init_scale = 2.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        GradScalerKwargs(1024)  # type: ignore[misc]


def test_unknown_field_names_the_closest_one() -> None:
    with pytest.raises(TypeError, match="Did you mean 'init_scale'"):
        GradScalerKwargs(init_scael=1.0)


def test_to_kwargs_and_explicit_fields() -> None:
    handler = GradScalerKwargs(init_scale=1024, growth_factor=2.0)
    assert handler.to_kwargs() == {"init_scale": 1024}
    assert handler.explicit_fields == {"init_scale", "growth_factor"}


def test_autocast_kwargs_validation() -> None:
    assert AutocastKwargs().enabled and AutocastKwargs().convert_outputs_to_fp32
    with pytest.raises(TypeError, match="AutocastKwargs.enabled"):
        AutocastKwargs(enabled=1)
    with pytest.raises(TypeError, match="AutocastKwargs.cache_enabled"):
        AutocastKwargs(cache_enabled="no")
