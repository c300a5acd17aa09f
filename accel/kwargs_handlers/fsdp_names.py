"""The names of FSDP's options that the command line shares with FullyShardedDataParallelPlugin.

Torch-free, so that the settings schema (accel/settings/catalogue.py) can derive the `fsdp_config:` keys,
the `--fsdp_*` flags and the ACCEL_FSDP_* variables from them without importing torch; the
plugin (accel/fsdp/plugin.py) checks its fields against the same names.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

WRAP_POLICIES = ("transformer_based_wrap", "size_based_wrap", "no_wrap")
"""The named auto_wrap_policy values (Accelerate's, in any case)."""
STATE_DICT_TYPES = ("SHARDED_STATE_DICT", "FULL_STATE_DICT")
"""How save_state writes a sharded model: each process its shards, or gathered on the main process."""
FSDP_VERSIONS = (2,)
"""The fsdp_version values accel runs: FSDP2 (torch.distributed.fsdp.fully_shard) only."""

FSDP_VERSION_1_REASON = (
    "accel shards with FSDP2 only (torch.distributed.fsdp.fully_shard, DTensor parameters); torch has deprecated "
    "FSDP1's FullyShardedDataParallel wrapper"
)
"""Why fsdp_version=1 is refused (said by the plugin and by the config checks)."""

CONFIG_KEYS: Mapping[str, str] = MappingProxyType(
    {
        "fsdp_version": "fsdp_version",
        "fsdp_auto_wrap_policy": "auto_wrap_policy",
        "fsdp_transformer_layer_cls_to_wrap": "transformer_cls_names_to_wrap",
        "fsdp_min_num_params": "min_num_params",
        "fsdp_reshard_after_forward": "reshard_after_forward",
        "fsdp_offload_params": "cpu_offload",
        "fsdp_state_dict_type": "state_dict_type",
        "fsdp_activation_checkpointing": "activation_checkpointing",
        "fsdp_activation_checkpointing_offload": "activation_checkpointing_offload",
        "fsdp_cpu_ram_efficient_loading": "cpu_ram_efficient_loading",
    }
)
"""Accelerate's `fsdp_config:` keys (and `--fsdp_*` flags) -> FullyShardedDataParallelPlugin's fields."""

CONFIG_HELP: Mapping[str, str] = MappingProxyType({
    "fsdp_version": "2: torch's fully_shard (FSDP2); 1 (FSDP1) is refused",
    "fsdp_auto_wrap_policy": "which submodules become sharded units: " + ", ".join(WRAP_POLICIES)
    + " (empty: the root only)",
    "fsdp_transformer_layer_cls_to_wrap": "transformer_based_wrap: block class names, comma-separated "
    "(empty: the model's _no_split_modules)",
    "fsdp_min_num_params": "size_based_wrap: parameters a submodule needs to become a unit (default 100000000)",
    "fsdp_reshard_after_forward": "free gathered parameters after each unit's forward (less memory, one more "
    "all-gather)",
    "fsdp_offload_params": "keep sharded parameters, gradients and optimizer state in CPU memory",
    "fsdp_state_dict_type": "how save_state writes the model: " + ", ".join(STATE_DICT_TYPES),
    "fsdp_activation_checkpointing": "recompute each unit's activations in backward instead of keeping them",
    "fsdp_activation_checkpointing_offload": "with fsdp_activation_checkpointing: keep the input each unit saves for "
    "its recompute in CPU memory until backward",
    "fsdp_cpu_ram_efficient_loading": "only process 0 reads the full weights; prepare sends them into the shards",
})
"""What each fsdp_config key does, for `accel launch --help` and the wizard."""
