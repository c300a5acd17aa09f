"""`accel launch --dry_run MODEL [script.py]`: the job's plan and each rank's memory, without training.

The settings are merged and checked as a launch checks them (flags over the config file: machines, the
device mesh's sizes), then MODEL (a preset, a transformers folder or cached name, or module:function,
as `accel estimate-memory` takes it) is built on the meta device and sharded as the job would shard it:
FSDP2, HSDP and tensor parallelism by torch's and accel's own code on a fake process group of the job's
size (accel.estimate.plan), DDP and ZeRO by their formulas. A layout that cannot shard is refused here,
naming the dimension, as the job's first `prepare` would refuse it. The script is not run.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel.cli.errors import CliError

if TYPE_CHECKING:
    from accel.estimate.layout import Layout

COMMAND = "accel launch --dry_run"
_HEADERS = ["rank", "place", "parameters", "gradients", "optimizer state", "comm buffers", "total"]


def dry_run(flags: Mapping[str, Any], config_flag: str | None, model: str, script: str | None) -> int:
    """Plan the job `flags` and the config describe for `model`; print the plan and the per-rank table.

    Args:
        flags: the launch settings given on the command line (name -> value).
        config_flag: --config_file, or None for the default config file (absent: defaults).
        model: what `accel estimate-memory` takes as its model.
        script: the script the job would run: checked to exist, not run.

    Example:
        `accel launch --num_processes 64 --use_fsdp --parallelism_config_dp_shard_size 8
        --parallelism_config_tp_size 8 --mixed_precision bf16 --dry_run llama3-70b train.py`
    """
    from accel.cli.config.file import active_config
    from accel.cli.launch.plan import merged_settings

    if script is not None and not Path(script).is_file():
        raise CliError(f"script {script} does not exist", command=COMMAND)
    values = merged_settings(flags, active_config(config_flag, COMMAND, planning=True), COMMAND)
    try:
        lines = _plan_lines(values, model)
    except ValueError as error:
        raise CliError(f"this job cannot start: {error}", command=COMMAND) from None
    print("\n".join(lines))
    return 0


def _plan_lines(values: Mapping[str, Any], model: str) -> list[str]:
    from accel.cli.estimate import ascii_table
    from accel.estimate.layout import layout_from_settings, precision_from_settings
    from accel.estimate.models import build_on_meta
    from accel.estimate.per_rank import estimate_ranks
    from accel.estimate.plan import plan_layout
    from accel.estimate.sizes import convert_bytes

    layout, precision = layout_from_settings(values), precision_from_settings(values)
    build_on_meta(model)  # a model that cannot be built says so before any planning
    rows: list[list[str]] = []
    if layout.kind in ("fsdp", "hsdp", "tp"):  # the real sharding code, at the job's size
        plans = plan_layout(lambda: build_on_meta(model), layout.parallelism, layout.processes, precision)
        ranks = [(plan.held, ", ".join(f"{dim} {index}" for dim, index in plan.coordinates.items())) for plan in plans]
        how = f"sharded by torch's fully_shard / parallelize_module on a fake process group of {layout.processes} ranks"
    else:
        everyone = estimate_ranks(lambda: build_on_meta(model), layout, precision)
        ranks = [(held, "") for held in (everyone[0], everyone[-1])][: min(2, len(everyone))]
        how = "DDP's replicas" if layout.kind == "ddp" else f"DeepSpeed ZeRO stage {layout.zero_stage}'s partitions"
    for held, place in ranks:
        rows.append([str(held.rank), place or "-", *(convert_bytes(value) for value in (
            held.parameters, held.gradients, held.optimizer, held.buffers, held.total))])
    return [
        f"{COMMAND}: {model}, {layout.describe()}, {precision}, AdamW; nothing is run",
        f"plan: {how}",
        ascii_table(_HEADERS, rows, f"Each rank of `{model}`, before activations"),
        *_communication_line(model, layout, precision),
        "every rank's full table and activations: accel estimate-memory --training (docs/memory.md)",
    ]


def _communication_line(model: str, layout: Layout, precision: str) -> list[str]:
    """What each rank hands to collectives per optimizer step, where communication.py estimates it without a
    micro-batch (tensor parallelism's moves activations: `accel estimate-memory --batch_size --seq_len`)."""
    from accel.estimate.models import build_on_meta
    from accel.estimate.per_rank import estimate_communication
    from accel.estimate.sizes import convert_bytes

    try:
        sent = estimate_communication(lambda: build_on_meta(model), layout, precision)
    except ValueError:  # a precision whose collectives are not estimated: nothing claimed
        return []
    if sent is None:
        return []
    kinds = [(name, value) for name, value in (("all-gather", sent.all_gather), ("reduce-scatter", sent.reduce_scatter),
                                               ("all-reduce", sent.all_reduce)) if value]
    return [f"each rank, per optimizer step: {', '.join(f'{name} {convert_bytes(v)}' for name, v in kinds)} "
            f"({convert_bytes(round(sent.ring_bytes))} sent by ring algorithms)"]
