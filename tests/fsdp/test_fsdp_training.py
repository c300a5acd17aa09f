"""FSDP2 training with 2 real processes (gloo, CPU): sharded like the one-process run of the same
global batch, in every option, with a global gradient norm and the full weights on process 0."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from launching import Launched, launch
from fsdp_tiny import as_lists, batch, loss_of, make_model, train_reference

SCRIPT = str(Path(__file__).parent / "fsdp_train_script.py")
OPTIONS = ("size", "offload", "no_reshard", "checkpointing")


@pytest.fixture(scope="module")
def run() -> Launched:
    result = launch(SCRIPT, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def reference() -> dict[str, list]:
    return train_reference(4)


def close(actual: object, expected: object, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    torch.testing.assert_close(torch.tensor(actual), torch.tensor(expected), rtol=rtol, atol=atol)


def test_fp32_fsdp_over_two_processes_trains_like_one_process_with_the_same_global_batch(run, reference) -> None:
    for losses in run.of("losses_blocks"):
        close(losses, reference["losses"])
    first, _ = run.of("full_state")
    assert first.keys() == reference["weights"].keys()
    for name, weights in reference["weights"].items():
        # AdamW moves a weight whose gradient is ~0 by up to lr (1e-2) per step, whatever the gradient's
        # last bits (which differ: the halves are summed in another order), so weights get a looser bound.
        close(first[name], weights, atol=5e-4)


def test_transformer_blocks_are_sharded_by_class_name_and_each_process_holds_half(run) -> None:
    assert run.of("units") == [["", "blocks.0", "blocks.1"]] * 2
    assert run.of("all_dtensors") == [True, True]
    assert sum(run.of("local_numel")) == run.of("total_numel")[0] == sum(p.numel() for p in make_model().parameters())


def test_an_optimizer_built_before_sharding_is_pointed_at_the_shards(run) -> None:
    assert run.of("retargeted") == [12, 12]  # every parameter of TinyNet


def test_clip_grad_norm_is_the_norm_of_the_unsharded_gradients(run, reference) -> None:
    for gathered, clipped in run.of("norm_pairs"):
        close(list(clipped.values()), list(gathered.values()))
    for norms in run.of("norms_blocks"):
        close(norms, reference["norms"])


def test_full_state_dict_is_on_the_main_process_only(run) -> None:
    first, second = run.of("full_state")
    assert first and second == {}
    assert list(first) == list(make_model().state_dict())  # the user's names, in order


@pytest.mark.parametrize("label", OPTIONS)
def test_every_option_trains_like_the_default(run, reference, label) -> None:
    for losses, norms in zip(run.of(f"losses_{label}"), run.of(f"norms_{label}")):
        close(losses, reference["losses"][:3])
        close(norms, reference["norms"][:3])


def test_size_based_wrap_makes_units_of_submodules_above_the_threshold(run) -> None:
    assert run.of("units_size") == [["", "blocks.0", "blocks.1"]] * 2  # 1,072 parameters each, embed 144, head 68


def test_cpu_offload_keeps_the_shards_on_the_cpu(run) -> None:
    assert run.of("offload_devices") == [["cpu"], ["cpu"]]
    assert run.of("forward_calls_offload") == [1, 1]


def test_activation_checkpointing_recomputes_each_block_in_backward(run) -> None:
    assert run.of("forward_calls_checkpointing") == [2, 2]


def test_accumulating_under_no_sync_gives_the_weights_of_syncing_every_micro_batch(run) -> None:
    synced, skipped = run.of("accumulated")[0]
    assert synced.keys() == skipped.keys()
    for name in synced:
        close(skipped[name], synced[name])


@pytest.mark.parametrize("precision, shards", [("bf16", "torch.float32"), ("bf16-true", "torch.bfloat16")])
def test_bf16_computes_in_bf16_and_keeps_the_shards_in_the_precisions_dtype(run, precision, shards) -> None:
    model = make_model()
    expected = [loss_of(model, *batch(0, rank, 2)).item() for rank in range(2)]
    for rank, seen in enumerate(run.of(f"half_{precision}")):
        assert seen["shard_dtypes"] == [shards]
        assert seen["compute"] == ["torch.bfloat16"]
        assert seen["loss"] == pytest.approx(expected[rank], rel=0.05)


def test_fp16_loss_scaler_skips_on_every_process_when_one_shard_overflows(run) -> None:
    expected = [{"stepped": False, "changed": False}, {"stepped": True, "changed": True}]
    assert run.of("fp16_steps") == [expected, expected]


def test_reference_weights_are_json_exact() -> None:
    state = make_model().state_dict()
    assert all(torch.equal(torch.tensor(as_lists(state)[n]), t) for n, t in state.items())
