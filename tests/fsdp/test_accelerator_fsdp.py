"""FSDP2 through the Accelerator (fsdp_plugin=...) with 2 real processes trains as one process with the global batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from fsdp_tiny import train_reference
from launching import launch
from safetensors.torch import load_file

from accel import Accelerator, FP8RecipeKwargs, FullyShardedDataParallelPlugin


def test_two_sharded_processes_train_as_one_process_with_the_global_batch(tmp_path: Path) -> None:
    run = launch("../../fsdp/accelerator_fsdp_script.py", str(tmp_path))
    assert run.returncode == 0, run.stderr[-3000:]
    reference = train_reference(4)
    assert run.of("distributed_type") == [True, True]
    assert run.of("kept_attributes") == [[True, False, "DTensor"]] * 2  # public parameter attributes survive sharding
    for losses in run.of("losses"):
        assert losses == pytest.approx(reference["losses"], abs=1e-5)
    for norms in run.of("norms"):
        assert norms == pytest.approx(reference["norms"], abs=1e-5)
    weights = run.of("weights")[0]
    assert run.of("weights")[1] is None and set(weights) == set(reference["weights"])
    for name, value in weights.items():
        assert torch.allclose(torch.tensor(value), torch.tensor(reference["weights"][name]), atol=5e-4), name
    assert run.of("saved") == [["model.safetensors"], []]
    saved = load_file(tmp_path / "model.safetensors")
    assert torch.equal(saved["head.weight"], torch.tensor(weights["head.weight"]))
    for files in run.of("save_state"):  # the shards, not the gathered model.safetensors
        assert "shards" in files and "manifest.json" in files and "model.safetensors" not in files


def test_bad_plugin_combinations_are_refused_at_construction() -> None:
    with pytest.raises(TypeError, match="give a FullyShardedDataParallelPlugin"):
        Accelerator(fsdp_plugin={"fsdp_version": 2})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="optimization_level='O2'.*under FSDP"):  # tests/fsdp/test_fp8_fsdp.py: the rest
        recipe = FP8RecipeKwargs(backend="native", optimization_level="O2")
        Accelerator(mixed_precision="fp8", kwarg_handlers=[recipe], fsdp_plugin=FullyShardedDataParallelPlugin())
