"""The kwarg_handlers list: either spelling, one handler per type, known types only."""

from __future__ import annotations

import datetime

import pytest

from accel import (
    Accelerator,
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
)
from accel.kwargs_handlers import collect_handlers


def test_both_spellings_are_accepted() -> None:
    scaler = GradScalerKwargs(init_scale=128)
    for spelling in ("kwarg_handlers", "kwargs_handlers"):
        accelerator = Accelerator(mixed_precision="fp16", **{spelling: [scaler]})
        assert accelerator.step_stats["loss_scale"] == 128


def test_both_spellings_at_once_raise() -> None:
    with pytest.raises(ValueError, match="both kwarg_handlers= and kwargs_handlers="):
        Accelerator(kwarg_handlers=[AutocastKwargs()], kwargs_handlers=[AutocastKwargs()])


def test_duplicate_handler_type_raises() -> None:
    with pytest.raises(ValueError, match="two AutocastKwargs instances"):
        Accelerator(kwarg_handlers=[AutocastKwargs(), AutocastKwargs(enabled=False)])


def test_unknown_handler_type_raises_naming_accepted_types() -> None:
    with pytest.raises(TypeError, match="of type dict.*accepted types: AutocastKwargs"):
        Accelerator(kwarg_handlers=[{"init_scale": 2}])


def test_a_handler_class_instead_of_an_instance_raises() -> None:
    with pytest.raises(TypeError, match=r"the class GradScalerKwargs, not an instance; write GradScalerKwargs\(...\)"):
        Accelerator(kwarg_handlers=[GradScalerKwargs])


def test_handlers_get_default_for_missing() -> None:
    handlers = collect_handlers([AutocastKwargs(enabled=False)], None)
    assert handlers.get(AutocastKwargs).enabled is False
    assert handlers.get(GradScalerKwargs) == GradScalerKwargs()
    assert handlers.has(AutocastKwargs) and not handlers.has(GradScalerKwargs)


def test_distributed_handlers_validate() -> None:
    assert InitProcessGroupKwargs(backend="GLOO").backend == "gloo"
    assert InitProcessGroupKwargs().timeout == datetime.timedelta(minutes=30)
    with pytest.raises(ValueError, match="backend='tcp'"):
        InitProcessGroupKwargs(backend="tcp")
    with pytest.raises(ValueError, match="positive datetime.timedelta"):
        InitProcessGroupKwargs(timeout=datetime.timedelta(0))
    with pytest.raises(ValueError, match="bucket_cap_mb=0"):
        DistributedDataParallelKwargs(bucket_cap_mb=0)
    with pytest.raises(TypeError, match="find_unused_parameters"):
        DistributedDataParallelKwargs(find_unused_parameters=None)
