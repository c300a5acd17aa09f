"""The registry: every canonical name builds its backend; handlers must fit the precision."""

from __future__ import annotations

import pytest
import torch

from accel import Accelerator, FP8RecipeKwargs, GradScalerKwargs
from accel.backends.names import CANONICAL_PRECISIONS
from accel.backends.registry import BACKENDS, create_backend
from accel.kwargs_handlers import collect_handlers

CPU = torch.device("cpu")
RUNNABLE = [name for name in CANONICAL_PRECISIONS if name != "fp8"]


@pytest.mark.parametrize("name", RUNNABLE)
def test_each_precision_builds_a_backend_reporting_its_name(name: str) -> None:
    backend = create_backend(name, CPU, collect_handlers(None, None))
    assert backend.name == name


def test_registry_covers_exactly_the_vocabulary() -> None:
    assert set(BACKENDS) == set(CANONICAL_PRECISIONS)


@pytest.mark.parametrize(
    ("name", "param_dtype", "compute_dtype"),
    [
        ("no", torch.float32, torch.float32),
        ("fp16", torch.float32, torch.float16),
        ("bf16", torch.float32, torch.bfloat16),
        ("16-true", torch.float16, torch.float16),
        ("bf16-true", torch.bfloat16, torch.bfloat16),
        ("64-true", torch.float64, torch.float64),
    ],
)
def test_dtypes(name: str, param_dtype: torch.dtype, compute_dtype: torch.dtype) -> None:
    backend = create_backend(name, CPU, collect_handlers(None, None))
    assert (backend.param_dtype, backend.compute_dtype) == (param_dtype, compute_dtype)


@pytest.mark.parametrize("name", ["no", "bf16", "16-true", "bf16-true", "64-true"])
def test_grad_scaler_kwargs_with_a_precision_without_scaler_raises(name: str) -> None:
    with pytest.raises(ValueError, match=f"GradScalerKwargs, which only mixed_precision='fp16'.*is '{name}'"):
        create_backend(name, CPU, collect_handlers([GradScalerKwargs()], None))


def test_fp8_recipe_with_another_precision_raises() -> None:
    with pytest.raises(ValueError, match="FP8RecipeKwargs, which only mixed_precision='fp8'"):
        create_backend("bf16", CPU, collect_handlers([FP8RecipeKwargs()], None))


def test_fp32_describes_itself_as_fp32_not_as_no() -> None:
    """A log line or plot title 'running: no' reads as "not running"; the name stays Accelerate's "no"."""
    accelerator = Accelerator()
    assert accelerator.mixed_precision == "no"
    assert accelerator.precision.describe() == "fp32 (no mixed precision)"
