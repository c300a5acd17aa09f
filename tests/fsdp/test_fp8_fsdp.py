"""FP8 under FSDP2: torchao (weights all-gathered in FP8) and native (FP8 GEMMs on the gathered
weights) with 2 real processes track the same FP8 backend under DDP; what cannot run sharded is
refused at construction, naming the field and the fix."""

from __future__ import annotations

import warnings

import pytest
import torch
from fsdp_tiny import batch, loss_of, make_model, optimizer_for
from launching import launch

from accel import Accelerator, FP8RecipeKwargs, FullyShardedDataParallelPlugin

pytest.importorskip("torchao")


def _fsdp_fp8(**recipe: object) -> Accelerator:
    return Accelerator(
        cpu=True, mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(**recipe)],
        fsdp_plugin=FullyShardedDataParallelPlugin(),
    )


def test_fp8_under_fsdp_tracks_the_same_backend_under_ddp() -> None:
    run = launch("../../fsdp/fp8_fsdp_script.py", "ao,native", timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    # ao: the FP8 all-gather casts each weight with the scale of the whole weight, as DDP's per-GEMM cast does.
    for ddp, fsdp in zip(run.of("ao_ddp_losses"), run.of("ao_fsdp_losses")):
        assert fsdp == pytest.approx(ddp, rel=1e-5)
    assert run.of("ao_fsdp_weight_sum")[0] == pytest.approx(run.of("ao_ddp_weight_sum")[0], rel=1e-5)
    # evaluation: FP8 under FSDP (the weights arrive in FP8), high precision under DDP
    assert run.of("ao_fsdp_eval")[0] == pytest.approx(run.of("ao_ddp_eval")[0], rel=0.02)
    assert run.of("ao_fsdp_eval")[0] != run.of("ao_ddp_eval")[0]
    assert run.of("ao_fsdp_precomputed") == [4, 4]  # every FP8 weight's scale, computed after the last step
    assert run.of("ao_ddp_precomputed") == [0, 0]
    assert all("enable_fsdp_float8_all_gather" in text for text in run.of("ao_fsdp_describe"))
    assert all("under FSDP2: weights all-gathered in FP8" in text for text in run.of("ao_fsdp_report"))
    assert all(w and w[0].startswith("FSDP with FP8RecipeKwargs(backend='ao')") for w in run.of("ao_fsdp_warnings"))
    # native: delayed scaling on the same GEMMs, and (the default recipe) the same float32 parameters and
    # gradients under DDP and FSDP: the same numbers (measured: equal to the last bit on 2 gloo processes).
    assert run.of("native_fsdp_losses")[0] == run.of("native_ddp_losses")[0]
    assert run.of("native_fsdp_weight_sum")[0] == run.of("native_ddp_weight_sum")[0]
    assert all(", O1" not in text for text in run.of("native_ddp_describe"))
    assert all(", O1" not in text and "O1/O2 storage does not run" in text for text in run.of("native_fsdp_describe"))
    assert run.of("native_fsdp_warnings") == [[], []]
    # an inf in one gradient shard of one process: all processes skip together (ao) or step together (native,
    # which checks its FP8 tensors, as under DDP, not the gradients of the layers outside FP8)
    assert run.of("ao_fsdp_skipped_inf") == [True, True]
    assert run.of("native_fsdp_skipped_inf") == [False, False]
    for losses in run.of("ao_fsdp_losses") + run.of("native_fsdp_losses"):
        assert losses[-1] < losses[0]


def test_native_storage_that_cannot_be_sharded_is_refused_when_asked_for() -> None:
    for level in ("O1", "O2"):
        with pytest.raises(ValueError, match=f"optimization_level='{level}'.*backend='native' under FSDP.*Leave"):
            _fsdp_fp8(backend="native", optimization_level=level)
    assert "O1/O2 storage does not run" in _fsdp_fp8(backend="native").precision.describe()
    # fp8_params runs sharded: the weights are all-gathered in FP8 (test_fp8_allgather.py)
    assert "weights all-gathered in FP8" in _fsdp_fp8(backend="native", fp8_params=True).precision.describe()


def test_ao_refuses_high_precision_evaluation_from_fp8_gathered_weights_when_asked_for() -> None:
    with pytest.raises(ValueError, match="use_autocast_during_eval=False.*FP8.*scaling='rowwise'"):
        _fsdp_fp8(backend="ao", use_autocast_during_eval=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        chosen = _fsdp_fp8(backend="ao", use_autocast_during_eval=True)  # said so: no warning
    assert chosen.precision.ao_config.enable_fsdp_float8_all_gather
    rowwise = _fsdp_fp8(backend="ao", scaling="rowwise", fp8_format="E4M3")
    assert not rowwise.precision.ao_config.enable_fsdp_float8_all_gather
    assert "gathered in the base precision" in rowwise.precision.describe()


def test_ao_without_fsdp_keeps_its_weights_unwrapped() -> None:
    accelerator = Accelerator(cpu=True, mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(backend="ao")])
    assert not accelerator.precision.ao_config.enable_fsdp_float8_all_gather
    assert "FSDP2" not in accelerator.precision.describe()


def test_one_process_fsdp_with_ao_trains_as_ao_without_fsdp() -> None:
    """With one process nothing is sharded, but the FP8 all-gather's weight wrapper is still there:
    it must train alike."""
    losses = {}
    for sharded in (False, True):
        plugin = FullyShardedDataParallelPlugin() if sharded else None
        recipe = FP8RecipeKwargs(backend="ao", base_precision="fp32", use_autocast_during_eval=True)
        accelerator = Accelerator(cpu=True, mixed_precision="fp8", kwarg_handlers=[recipe], fsdp_plugin=plugin)
        model = make_model()
        optimizer = optimizer_for(model)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the one-process FSDP warning
            model, optimizer = accelerator.prepare(model, optimizer)
        losses[sharded] = []
        for step in range(3):
            loss = loss_of(model, *batch(step))
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses[sharded].append(loss.item())
        accelerator.end_training()
    assert losses[True] == pytest.approx(losses[False], rel=1e-6)
    assert losses[True][0] != losses[True][-1]
    torch.testing.assert_close(torch.tensor(losses[True]), torch.tensor(losses[False]))
