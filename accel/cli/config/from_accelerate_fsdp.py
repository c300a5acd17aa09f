"""Read the FSDP part of a Hugging Face Accelerate config.yaml: `distributed_type: FSDP` and `fsdp_config:`.

accel runs FSDP2 only. The keys accel shares pass through to the ordinary checks (where
`fsdp_version: 1` is refused with the reason). An Accelerate FSDP1 config (no fsdp_version:
Accelerate's default is 1) runs as FSDP2, said in a warning: its sharding strategy FULL_SHARD /
SHARD_GRAD_OP becomes fsdp_reshard_after_forward true / false, and the FSDP1 options that FSDP2
does by itself are dropped at the values that mean so; HYBRID_SHARD (and _HYBRID_SHARD_ZERO2) is
HSDP: `hybrid_sizes` gives the ParallelismConfig sizes (replicate across machines, shard within one);
NO_SHARD is refused (it is DDP). Anything else is named in the caller's one warning of what is ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from accel.cli.errors import CliError
from accel.settings import FSDP_SECTION, FSDP_SETTINGS_BY_KEY

_STRATEGIES = {"FULL_SHARD": True, "1": True, "SHARD_GRAD_OP": False, "2": False,
               "HYBRID_SHARD": True, "4": True, "_HYBRID_SHARD_ZERO2": False, "HYBRID_SHARD_ZERO2": False, "5": False}
"""FSDP1 sharding strategies that FSDP2 says with reshard_after_forward (Accelerate's names and numbers); the
hybrid ones also with a 2-D mesh (`hybrid_sizes`)."""
_DONE_BY_FSDP2: dict[str, tuple[Any, ...]] = {
    "fsdp_use_orig_params": (True,),
    "fsdp_sync_module_states": (True,),
    "fsdp_forward_prefetch": (False,),
    "fsdp_backward_prefetch": ("BACKWARD_PRE", "NO_PREFETCH"),
}
"""FSDP1 options at values FSDP2 behaves as anyway (it prefetches and keeps the original parameters itself)."""
RESHARD = "fsdp_reshard_after_forward"


def translate_fsdp(
    data: Mapping[Any, Any], sharded: bool, dropped: list[str], path: Path
) -> tuple[dict[str, Any] | None, str | None]:
    """accel's fsdp_config for Accelerate's `data` (read from `path`), and a note to warn (or None).

    `sharded`: whether distributed_type is FSDP; otherwise a non-empty fsdp_config is recorded in
    `dropped` (nothing would read it). Keys that mean nothing here are recorded in `dropped` too.
    A sharding strategy FSDP2 has no equivalent for (NO_SHARD) is refused.
    """
    section = data.get(FSDP_SECTION)
    section = section if isinstance(section, Mapping) else {}
    if not sharded:
        if section:
            dropped.append(f"{FSDP_SECTION} (distributed_type is not FSDP)")
        return None, None
    kept: dict[str, Any] = {}
    for key, value in section.items():
        if key == "fsdp_min_num_params" and value == 0:
            continue  # Accelerate writes it with the wrap policies that do not read it
        if key in FSDP_SETTINGS_BY_KEY:
            kept[key] = _reshard(value) if key == RESHARD else value
        elif key == "fsdp_sharding_strategy":
            kept.setdefault(RESHARD, _reshard_for(value, path))
        elif value not in _DONE_BY_FSDP2.get(str(key), ()):
            dropped.append(f"{FSDP_SECTION}.{key}={value}")
    note = None
    if "fsdp_version" not in section:
        note = ("distributed_type: FSDP without fsdp_version, which Accelerate reads as FSDP1; accel runs FSDP2 "
                "(torch's fully_shard): add `fsdp_version: 2` to its fsdp_config to say so")
    return kept, note


def _reshard_for(strategy: Any, path: Path) -> bool:
    """FSDP2's reshard_after_forward for an FSDP1 sharding strategy; CliError for one it cannot run."""
    if str(strategy).upper() in _STRATEGIES:
        return _STRATEGIES[str(strategy).upper()]
    raise CliError(
        f"{path}: {FSDP_SECTION}.fsdp_sharding_strategy={strategy} has no FSDP2 equivalent in accel: FULL_SHARD "
        "(fsdp_reshard_after_forward: true), SHARD_GRAD_OP (false) or HYBRID_SHARD (HSDP). For NO_SHARD (a full copy "
        "in each process) use DDP: distributed_type MULTI_GPU or MULTI_CPU."
    )


def _reshard(value: Any) -> Any:
    """Accelerate's FSDP1 spelling of fsdp_reshard_after_forward (a strategy name) as FSDP2's bool."""
    return _STRATEGIES.get(value.upper(), value) if isinstance(value, str) else value



def hybrid_sizes(data: Mapping[Any, Any]) -> dict[str, int] | None:
    """For `fsdp_sharding_strategy: HYBRID_SHARD` (FSDP1's HSDP): the ParallelismConfig sizes that say it in
    FSDP2, replicated across the num_machines and sharded over each machine's processes; None otherwise."""
    section = data.get(FSDP_SECTION)
    strategy = str(section.get("fsdp_sharding_strategy", "")).upper() if isinstance(section, Mapping) else ""
    if "HYBRID" not in strategy and strategy not in ("4", "5"):
        return None
    machines = int(data.get("num_machines") or 1)
    processes = int(data.get("num_processes") or 1)
    return {"parallelism_config_dp_replicate_size": machines, "parallelism_config_dp_shard_size": max(1, processes // machines)}
