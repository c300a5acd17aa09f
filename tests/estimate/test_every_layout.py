"""Every precision in every layout accel runs has an answer, for the example GPT and a Llama-3-8B-shaped model:
a per-rank number, or the refusal accel itself makes (named), never a silent guess."""

from __future__ import annotations

import pytest
from torch import nn

from accel.estimate.layout import Layout
from accel.estimate.models import build_on_meta
from accel.estimate.per_rank import estimate_ranks

PRECISIONS = ("no", "fp16", "bf16", "bf16-true", "16-true", "64-true", "fp8-native", "fp8-native-O1", "fp8-native-O2")
FP8 = ("fp8-native", "fp8-native-O1", "fp8-native-O2")
LAYOUTS = {
    "one process": Layout(1), "ddp 8": Layout(8), "fsdp 8": Layout(8, "fsdp", {"dp_shard": 8}),
    "hsdp 2x4": Layout(8, "hsdp", {"dp_replicate": 2, "dp_shard": 4}), "fsdp 2 x tp 4": Layout(8, "tp", {"dp_shard": 2, "tp": 4}),
    **{f"zero{stage} 8": Layout(8, "zero", {}, stage) for stage in (1, 2, 3)},
    "nf4 ddp 8": Layout(8, quantization="nf4"), "nf4-dq fsdp 8": Layout(8, "fsdp", {"dp_shard": 8}, quantization="nf4-dq"),
}


def refusal(model: str, layout: Layout, precision: str) -> str | None:
    """What accel refuses (a fragment of its message), None where it runs."""
    if layout.kind == "tp":
        return "with tp_size=4: accel runs no FP8 backend" if precision in FP8 else (
            "has no tp_plan" if model == "gpt" else None)
    if layout.kind == "zero" and (precision in FP8 or precision.endswith("-true")):
        return "is not one accel runs under DeepSpeed"
    if layout.kind in ("fsdp", "hsdp") and precision in FP8[1:]:
        return f"with layout='{layout.kind}': accel refuses"
    if layout.quantization and precision in FP8:
        return "accel refuses bitsandbytes with FP8"
    return None


@pytest.fixture(scope="module", params=["gpt", "llama3-8b"])
def model(request: pytest.FixtureRequest) -> tuple[str, nn.Module]:
    return request.param, build_on_meta(request.param)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_each_precision_answers(model: tuple[str, nn.Module], layout: str) -> None:
    name, built = model
    whole = {precision: max(r.total for r in estimate_ranks(lambda: built, Layout(1), precision))
             for precision in ("no", "bf16-true")}
    for precision in PRECISIONS:
        refused = refusal(name, LAYOUTS[layout], precision)
        build = (lambda: build_on_meta(name)) if LAYOUTS[layout].kind == "tp" else (lambda: built)  # a plan shards it
        if refused:
            with pytest.raises(ValueError, match=refused):
                estimate_ranks(build, LAYOUTS[layout], precision)
            continue
        ranks = estimate_ranks(build, LAYOUTS[layout], precision)
        largest = max(rank.total for rank in ranks)
        assert largest > 0, (layout, precision)
        sharded = LAYOUTS[layout].kind in ("fsdp", "hsdp", "tp", "zero") or LAYOUTS[layout].quantization
        state = max(rank.parameters + rank.gradients + rank.optimizer for rank in ranks)
        if sharded and precision in whole:  # each of 8 ranks holds less than one process does (buffers aside: ZeRO 3
            assert state < whole[precision], (layout, precision)  # keeps a 5e8-element reduce bucket whatever the size)
