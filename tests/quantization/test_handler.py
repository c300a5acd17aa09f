"""BitsandbytesKwargs validates at construction, and the Accelerator accepts it beside any handler."""

from __future__ import annotations

import pytest
import torch

import accel
import accel.utils
from accel.kwargs_handlers import BitsandbytesKwargs, collect_handlers


def test_defaults_and_spellings() -> None:
    assert BitsandbytesKwargs() == BitsandbytesKwargs(mode="nf4-dq", dtype=None, ignore_modules=())
    assert BitsandbytesKwargs(mode="NF4").mode == "nf4"
    assert BitsandbytesKwargs(dtype="bf16").dtype is torch.bfloat16
    assert BitsandbytesKwargs(dtype=torch.float32).dtype is torch.float32
    assert BitsandbytesKwargs(mode="int8", dtype="float16").dtype is torch.float16
    assert BitsandbytesKwargs(ignore_modules={"lm_head", "blocks.0"}).ignore_modules == ("blocks.0", "lm_head")
    assert BitsandbytesKwargs(mode="fp4").to_kwargs() == {"mode": "fp4"}


def test_exported_from_accel_and_accel_utils_and_collected() -> None:
    assert accel.BitsandbytesKwargs is accel.utils.BitsandbytesKwargs is BitsandbytesKwargs
    handler = BitsandbytesKwargs(mode="nf4")
    assert collect_handlers([handler], None).get(BitsandbytesKwargs) is handler


def test_unknown_mode_names_the_closest() -> None:
    with pytest.raises(ValueError, match=r"BitsandbytesKwargs.mode='nf4dq'.*'int8-training'.*Did you mean 'nf4-dq'\?"):
        BitsandbytesKwargs(mode="nf4dq")


@pytest.mark.parametrize("mode", ["int8", "int8-training"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, "bf16"])
def test_int8_modes_refuse_a_dtype_other_than_float16(mode: str, dtype: object) -> None:
    with pytest.raises(ValueError, match=rf"mode='{mode}', dtype=torch.(bfloat16|float32)\) cannot run.*float16 only"):
        BitsandbytesKwargs(mode=mode, dtype=dtype)


def test_bad_dtype_and_patterns() -> None:
    with pytest.raises(ValueError, match=r"dtype=torch.float64 is not accepted; accepted: torch.float16"):
        BitsandbytesKwargs(dtype=torch.float64)
    with pytest.raises(ValueError, match=r"dtype='fp8'.*Or pass a torch.dtype"):
        BitsandbytesKwargs(dtype="fp8")
    with pytest.raises(TypeError, match=r"ignore_modules='lm_head' must be a collection.*ignore_modules=\['lm_head'\]"):
        BitsandbytesKwargs(ignore_modules="lm_head")
    with pytest.raises(TypeError, match=r"ignore_modules=\[1\] must be a list, tuple or set of strings"):
        BitsandbytesKwargs(ignore_modules=[1])
    with pytest.raises(TypeError, match="unknown argument 'modes'.*Did you mean 'mode'"):
        BitsandbytesKwargs(modes="nf4")
