"""The layout an estimate is for, read from launch settings: each kind, and the refusals a launch would make."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accel.estimate.layout import Layout, layout_from_settings, precision_from_settings


@pytest.mark.parametrize(("values", "expected"), [
    ({}, Layout(1, "ddp")),
    ({"num_processes": 4}, Layout(4, "ddp")),
    ({"num_processes": 4, "use_fsdp": True}, Layout(4, "fsdp", {"dp_shard": 4})),
    ({"num_processes": 4, "use_fsdp": True, "parallelism_config_dp_replicate_size": 2,
      "parallelism_config_dp_shard_size": 2}, Layout(4, "hsdp", {"dp_replicate": 2, "dp_shard": 2})),
    ({"num_processes": 4, "parallelism_config_tp_size": 4}, Layout(4, "tp", {"tp": 4})),
    ({"num_processes": 8, "use_deepspeed": True}, Layout(8, "zero", {}, 2)),  # DeepSpeedPlugin's default stage
    ({"num_processes": 8, "use_deepspeed": True, "zero_stage": 3, "offload_optimizer_device": "cpu",
      "offload_param_device": "none"}, Layout(8, "zero", {}, 3, offload_optimizer=True)),
    ({"num_processes": 2, "bnb_mode": "nf4"}, Layout(2, "ddp", quantization="nf4")),
])
def test_each_kind(values: dict[str, object], expected: Layout) -> None:
    assert layout_from_settings(values) == expected


@pytest.mark.parametrize(("values", "said"), [
    ({"use_fsdp": True, "use_deepspeed": True}, "use_fsdp and use_deepspeed are both on"),
    ({"num_processes": 4, "parallelism_config_dp_shard_size": 4}, "dp_shard_size=4 shards the model with FSDP2, but "
     "FSDP is not on"),
    ({"num_processes": 8, "parallelism_config_tp_size": 3}, "tp_size=3 .* = 3 processes, but the world size"),
])
def test_refusals_name_the_setting(values: dict[str, object], said: str) -> None:
    with pytest.raises(ValueError, match=said):
        layout_from_settings(values)


def test_precisions() -> None:
    assert precision_from_settings({}) == "no"
    assert precision_from_settings({"mixed_precision": "bf16-true"}) == "bf16-true"
    assert precision_from_settings({"mixed_precision": "fp8", "fp8_backend": "native"}) == "fp8-native"
    with pytest.raises(ValueError, match="fp8_backend 'auto': only accel's native FP8 is estimated"):
        precision_from_settings({"mixed_precision": "fp8"})


def test_a_deepspeed_config_file_is_read_as_the_job_reads_it(tmp_path: Path) -> None:
    from accel.estimate.models import build_on_meta
    from accel.estimate.per_rank import estimate_ranks
    from accel.estimate.zero import zero_bytes

    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"zero_optimization": {
        "stage": 3, "reduce_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
        "stage3_prefetch_bucket_size": "auto", "offload_optimizer": {"device": "cpu"}}}))
    layout = layout_from_settings({"num_processes": 8, "use_deepspeed": True, "deepspeed_config_file": str(config)})
    assert (layout.zero_stage, layout.offload_optimizer, layout.offload_param) == (3, True, False)
    model = build_on_meta("llama3-8b")
    [first, *_] = estimate_ranks(lambda: model, layout, "bf16")
    # "auto" as prepare fills it: hidden_size squared, 10 x hidden_size
    [expected, *_] = zero_bytes(model, "bf16", 3, 8, offload_optimizer=True, reduce_bucket_size=4096 * 4096,
                                param_persistence_threshold=40960)
    assert first.total == expected.device.total and first.host == expected.host.total
    assert first.buffers == 4096 * 4096 * 2  # the bf16 reduce bucket
    with pytest.raises(ValueError, match="zero_stage"):  # a flag that disagrees with the file: the plugin's refusal
        layout_from_settings({"use_deepspeed": True, "deepspeed_config_file": str(config), "zero_stage": 2})
