"""The deepspeed_config settings' table (Accelerate's config keys), from which accel/settings/catalogue.py derives
each one's flag (`--zero_stage`), variable (ACCEL_ZERO_STAGE) and DeepSpeedPlugin field; Accelerate's launcher
hands them over as ACCELERATE_DEEPSPEED_* (ACCELERATE_SPELLINGS). Torch-free, like the rest of the schema."""

from __future__ import annotations

from typing import Any

from accel.settings.kinds import BoolKind, ChoiceKind, FloatKind, IntKind, Kind, TextKind

DEEPSPEED_SECTION = "deepspeed_config"
"""The YAML mapping that holds DeepSpeed's options, under Accelerate's keys (zero_stage, ...)."""
USE_HELP = ("train through DeepSpeed's ZeRO engine instead of DDP; the deepspeed_config keys say how "
            "(an Accelerate config's distributed_type: DEEPSPEED)")
_OFFLOAD = ChoiceKind(("none", "cpu", "nvme"))
TABLE: dict[str, tuple[Kind, Any, str, str]] = {
    "deepspeed_config_file": (TextKind(accepted="a path to a DeepSpeed JSON file"), None, "hf_ds_config",
                              "a DeepSpeed JSON config (its other keys then come from it)"),
    "zero_stage": (IntKind(minimum=0, maximum=3), None, "zero_stage",
                   "ZeRO stage: 1 shards optimizer states, 2 also gradients, 3 also parameters (default 2)"),
    "offload_optimizer_device": (_OFFLOAD, None, "offload_optimizer_device", "where ZeRO keeps optimizer states"),
    "offload_param_device": (_OFFLOAD, None, "offload_param_device", "where ZeRO 3 keeps parameters"),
    "gradient_clipping": (FloatKind(), None, "gradient_clipping", "global gradient norm limit (unset: no clipping)"),
    "zero3_init_flag": (BoolKind(), None, "zero3_init_flag", "build transformers models partitioned (ZeRO 3)"),
    "zero3_save_16bit_model": (BoolKind(), None, "zero3_save_16bit_model",
                               "gather 16-bit weights when saving under ZeRO 3"),
}
"""YAML key (also the flag and ACCEL_ variable stem) -> (kind, default, DeepSpeedPlugin field, help)."""
ACCELERATE_SPELLINGS = {
    "use_deepspeed": "ACCELERATE_USE_DEEPSPEED", "deepspeed_config_file": "ACCELERATE_DEEPSPEED_CONFIG_FILE",
    "zero_stage": "ACCELERATE_DEEPSPEED_ZERO_STAGE", "gradient_clipping": "ACCELERATE_GRADIENT_CLIPPING",
    "offload_optimizer_device": "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE",
    "offload_param_device": "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE",
    "zero3_init_flag": "ACCELERATE_DEEPSPEED_ZERO3_INIT",
    "zero3_save_16bit_model": "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL",
}
"""The variable `accelerate launch --use_deepspeed` sets for each setting."""
