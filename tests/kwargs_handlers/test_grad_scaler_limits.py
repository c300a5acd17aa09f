"""GradScalerKwargs' accel-only fields: the loss scale's floor and the limit on skipped steps in a row."""

from __future__ import annotations

import pytest

from accel import GradScalerKwargs


def test_defaults_keep_accelerate_scripts_unchanged() -> None:
    handler = GradScalerKwargs(init_scale=1024.0, growth_interval=100)
    assert handler.to_kwargs() == {"init_scale": 1024.0, "growth_interval": 100}
    assert (handler.min_scale, handler.max_consecutive_skips, handler.scale_floor) == (None, 100, 1.0)


def test_the_floor_is_one_capped_at_init_scale_unless_given() -> None:
    assert GradScalerKwargs(init_scale=0.5).scale_floor == 0.5
    assert GradScalerKwargs(min_scale=2**-24).scale_floor == 2**-24


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"min_scale": 0.0}, r"GradScalerKwargs.min_scale=0.0 must be > 0 and <= init_scale=65536.0"),
        ({"min_scale": 8.0, "init_scale": 4.0}, r"min_scale=8.0 must be > 0 and <= init_scale=4.0"),
        ({"min_scale": "1"}, r"GradScalerKwargs.min_scale='1' must be a finite number"),
        ({"max_consecutive_skips": 0}, r"GradScalerKwargs.max_consecutive_skips=0 must be an int >= 1"),
        ({"max_consecutive_skips": 1.5}, r"GradScalerKwargs.max_consecutive_skips=1.5 must be an int"),
    ],
)
def test_bad_limits_are_refused_at_construction(changes: dict[str, object], message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        GradScalerKwargs(**changes)
