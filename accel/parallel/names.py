"""The names of ParallelismConfig's sizes and of the device mesh's dimensions (Accelerate's), torch-free.

The settings schema (accel/settings.py) derives one setting per size from PARALLELISM_SIZES:
`parallelism_config: {parallelism_config_tp_size: 2}` in config.yaml, `--parallelism_config_tp_size`,
ACCEL_PARALLELISM_CONFIG_TP_SIZE, and Accelerate's own PARALLELISM_CONFIG_TP_SIZE.
"""

from __future__ import annotations

PARALLELISM_SIZES = {
    "dp_replicate_size": "processes holding the same shards (data parallel replicas; HSDP with dp_shard_size > 1)",
    "dp_shard_size": "processes over which FSDP2 shards the model (needs use_fsdp)",
    "tp_size": "processes over which tensor parallelism splits each layer (ranks of one group see the same batch)",
    "cp_size": "context parallelism (refused: torch's ring attention runs on CUDA attention kernels only)",
}
"""ParallelismConfig's size fields -> what each means (the help of its setting)."""
MESH_ORDER = ("dp_replicate", "dp_shard", "cp", "sp", "tp")
"""Accelerate's order of the mesh dimensions, outermost first (tp innermost: its ranks are neighbours)."""
