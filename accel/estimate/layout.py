"""The layout an estimate is for, read from the settings a launch reads (config.yaml and the launch flags).

`accel estimate-memory --config_file config.yaml` and `accel launch --dry_run` both turn the settings in
force (accel/settings: num_processes, mixed_precision and its FP8 recipe, use_fsdp, the
parallelism_config sizes, use_deepspeed with zero_stage and its offload devices, bitsandbytes' bnb_mode)
into one `Layout`, so that the estimate is of the job the same settings launch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from accel.parallel.config import ParallelismConfig, check_world

KINDS = ("ddp", "fsdp", "hsdp", "tp", "zero")


@dataclass(frozen=True)
class Layout:
    """How the processes hold the model.

    `kind`: "ddp" (one process, or replicas), "fsdp" (FSDP2 over every process), "hsdp" (FSDP2 over
    `sizes["dp_shard"]` processes, replicated across the groups), "tp" (a device mesh with tensor
    parallelism, FSDP2 over its dp_shard dimension if any) or "zero" (DeepSpeed ZeRO `zero_stage`).
    """

    processes: int
    kind: str = "ddp"
    sizes: dict[str, int] = field(default_factory=dict)
    zero_stage: int | None = None
    offload_optimizer: bool = False
    offload_param: bool = False
    quantization: str | None = None
    zero_options: dict[str, int | str] = field(default_factory=dict)
    """DeepSpeed's zero_optimization sizes the estimate reads (reduce_bucket_size, the stage 3 persistence
    thresholds, sub_group_size) where a deepspeed_config_file gives them; "auto" is filled from the model."""

    @property
    def parallelism(self) -> ParallelismConfig:
        """The sizes as a ParallelismConfig (every process in one dimension where none is given)."""
        sizes = dict(self.sizes)
        if self.kind == "fsdp" and not sizes:
            sizes["dp_shard"] = self.processes
        return ParallelismConfig(dp_replicate_size=sizes.get("dp_replicate", 1), dp_shard_size=sizes.get("dp_shard", 1),
                                 tp_size=sizes.get("tp", 1))

    def describe(self) -> str:
        """One line: 'fsdp over 8 processes (dp_shard 8)', 'zero3 over 64 processes, optimizer offloaded'."""
        name = f"zero{self.zero_stage}" if self.kind == "zero" else self.kind
        mesh = ", ".join(f"{dim} {size}" for dim, size in self.sizes.items() if size > 1)
        offloaded = [what for what, on in (("optimizer", self.offload_optimizer), ("parameters", self.offload_param))
                     if on]
        return (f"{name} over {self.processes} process{'es' if self.processes > 1 else ''}"
                + (f" ({mesh})" if mesh else "") + (f", {' and '.join(offloaded)} offloaded" if offloaded else "")
                + (f", bitsandbytes {self.quantization}" if self.quantization else ""))


def layout_from_settings(values: Mapping[str, Any]) -> Layout:
    """The layout the settings `values` (setting name -> value, as a launch merges them) describe.

    Args:
        values: settings by name (accel/settings), e.g. {"num_processes": 8, "use_fsdp": True}; absent ones
            take their defaults.

    Raises:
        ValueError: sizes that do not multiply to num_processes (naming each), dp_shard_size without FSDP,
            or FSDP and DeepSpeed together.

    Example:
        >>> layout_from_settings({"num_processes": 8, "use_fsdp": True, "parallelism_config_dp_shard_size": 4,
        ...                       "parallelism_config_tp_size": 2}).describe()
        'tp over 8 processes (dp_shard 4, tp 2)'
    """
    processes = int(values.get("num_processes") or 1)
    sizes = {name: int(values.get(f"parallelism_config_{name}_size") or 1)
             for name in ("dp_replicate", "dp_shard", "tp", "cp", "sp")}
    fsdp, deepspeed = bool(values.get("use_fsdp")), bool(values.get("use_deepspeed"))
    if fsdp and deepspeed:
        raise ValueError("use_fsdp and use_deepspeed are both on: a job runs one of them; turn one off")
    check_world({f"{name}_size": size for name, size in sizes.items()}, processes, fsdp=fsdp,
                where="parallelism_config")
    quantization = values.get("bnb_mode") if any(name.startswith("bnb_") for name in values) else None
    if deepspeed:
        return _zero_layout(values, processes, quantization)
    if sizes["tp"] > 1:
        return Layout(processes, "tp", _given(sizes), quantization=quantization)
    if fsdp and sizes["dp_replicate"] > 1 and sizes["dp_shard"] > 1:
        return Layout(processes, "hsdp", _given(sizes), quantization=quantization)
    if fsdp and processes > 1:
        return Layout(processes, "fsdp", {"dp_shard": processes}, quantization=quantization)
    return Layout(processes, "ddp", {}, quantization=quantization)


def precision_from_settings(values: Mapping[str, Any]) -> str:
    """The estimate's name of the precision the settings run: mixed_precision, and for fp8 its backend and
    level as `accel bench` names them ("fp8-native-O1"); FP8 backends other than native are refused.

    Example:
        >>> precision_from_settings({"mixed_precision": "fp8", "fp8_backend": "native", "fp8_optimization_level": "O2"})
        'fp8-native-O2'
    """
    precision = str(values.get("mixed_precision") or "no")
    if precision != "fp8":
        return precision
    backend = values.get("fp8_backend") or "auto"
    if backend != "native":
        raise ValueError(f"mixed_precision fp8 with fp8_backend {backend!r}: only accel's native FP8 is estimated "
                         "(its storage is accel's own); give fp8_backend native, or estimate bf16 for the layout")
    level = values.get("fp8_optimization_level")
    return f"fp8-native-{level}" if level else "fp8-native"


ZERO_OPTIONS = ("reduce_bucket_size", "stage3_param_persistence_threshold", "stage3_model_persistence_threshold",
                "sub_group_size")
"""The zero_optimization keys that change what a rank holds (accel.estimate.zero's arguments)."""


def _zero_layout(values: Mapping[str, Any], processes: int, quantization: str | None) -> Layout:
    """ZeRO as the job's DeepSpeedPlugin sees it: the flags and the deepspeed_config_file agreed (the plugin's
    own rules: stage 2 by default, a flag and the file may not disagree), its offload devices and bucket sizes."""
    from accel.deepspeed.plugin import DeepSpeedPlugin

    plugin = DeepSpeedPlugin(hf_ds_config=values.get("deepspeed_config_file"), zero_stage=values.get("zero_stage"),
                             offload_optimizer_device=values.get("offload_optimizer_device"),
                             offload_param_device=values.get("offload_param_device"))
    zero = plugin.deepspeed_config["zero_optimization"]
    options = {key: zero[key] for key in ZERO_OPTIONS if key in zero}
    return Layout(processes, "zero", {}, plugin.zero_stage, plugin.offload_optimizer_device != "none",
                  plugin.offload_param_device != "none", quantization, options)


def _given(sizes: dict[str, int]) -> dict[str, int]:
    return {name: size for name, size in sizes.items() if size > 1}
