"""The names of the device mesh's dimensions (Accelerate's), torch-free.

The sizes' settings are in accel/settings/catalogue.py (PARALLELISM_SETTINGS): `parallelism_config:
{parallelism_config_tp_size: 2}` in config.yaml, `--parallelism_config_tp_size`,
ACCEL_PARALLELISM_CONFIG_TP_SIZE, and Accelerate's own PARALLELISM_CONFIG_TP_SIZE.
"""

from __future__ import annotations

MESH_ORDER = ("dp_replicate", "dp_shard", "cp", "sp", "tp")
"""Accelerate's order of the mesh dimensions, outermost first (tp innermost: its ranks are neighbours)."""
