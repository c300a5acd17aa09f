"""Which library FP8 backends run under FSDP2: TransformerEngine from 2.10 on (its fully_shard support),
without accel's fp8_params; MS-AMP never (its ZeRO-based O3 is DeepSpeed's, not FSDP's). Checked at
construction against the stand-ins, so that a refusal comes before any model is built."""

from __future__ import annotations

from typing import Any

import pytest

from accel import Accelerator, FP8RecipeKwargs, FullyShardedDataParallelPlugin


def sharded(backend: str, **recipe: object) -> Accelerator:
    recipe.setdefault("base_precision", "fp32")
    return Accelerator(
        mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(backend=backend, **recipe)],
        fsdp_plugin=FullyShardedDataParallelPlugin(),
    )


@pytest.mark.parametrize("version", ["2.0.0", "2.9.1"])
def test_te_older_than_2_10_is_refused_under_fsdp_naming_the_version(fake_te: Any, fp8_gpu: Any, version: str) -> None:
    fake_te.install(generation="autocast" if version >= "2.9" else "fp8_autocast", version=version)
    with pytest.raises(ValueError, match=f"TransformerEngine {version}.*fully_shard.*from 2.10 on"):
        sharded("te")


def test_te_2_10_runs_under_fsdp_and_says_so(fake_te: Any, fp8_gpu: Any) -> None:
    fake_te.install(version="2.10.0")
    accelerator = sharded("te")
    assert accelerator.precision.fsdp_precision == "no"
    assert "FSDP2: TransformerEngine 2.10.0 modules sharded" in accelerator.precision.describe()
    with pytest.raises(ValueError, match="fp8_params=True.*backend='te' under FSDP"):
        sharded("te", fp8_params=True)


def test_te_under_ddp_is_untouched(fake_te: Any, fp8_gpu: Any) -> None:
    fake_te.install(version="2.9.0")
    accelerator = Accelerator(mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(backend="te")])
    assert "FSDP2" not in accelerator.precision.describe()


def test_msamp_is_refused_under_fsdp(fake_msamp: Any, fp8_gpu: Any) -> None:
    fake_msamp.install()
    with pytest.raises(ValueError, match="backend='msamp'\\) cannot run under FSDP.*'ao' or 'native'"):
        sharded("msamp")
