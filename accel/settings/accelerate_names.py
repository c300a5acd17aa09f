"""Accelerate's spellings of the settings: the config sections accel takes over from Accelerate's config.yaml,
and the variable through which Accelerate's launcher hands each setting to a script.

`accelerate launch` sets `ACCELERATE_MIXED_PRECISION`, `ACCELERATE_USE_CPU`,
`ACCELERATE_GRADIENT_ACCUMULATION_STEPS`, `ACCELERATE_DYNAMO_*`, `ACCELERATE_USE_FSDP`, FSDP's own `FSDP_*`,
ParallelismConfig's `PARALLELISM_CONFIG_*` and DeepSpeed's `ACCELERATE_DEEPSPEED_*` (accel/settings/deepspeed_names.py).
`accelerate_variable` derives each from the setting's name and section; `Setting.accelerate_env_var`
(accel/settings/setting.py) asks it, and `Setting.lookup` reads that variable beside ACCEL_<NAME>. The catalogue
(accel/settings/catalogue.py) checks that every name here is one of its settings. Torch-free, like the rest of the schema.
"""

from __future__ import annotations

from accel.settings.deepspeed_names import ACCELERATE_SPELLINGS as ACCELERATE_DEEPSPEED_SPELLINGS

ACCELERATE_PREFIX = "ACCELERATE_"
"""The prefix of the variables Accelerate's launcher sets (FSDP's options have none: FSDP_VERSION, ...)."""
DYNAMO_SECTION = "dynamo_config"
"""The YAML mapping that holds torch.compile's settings (Accelerate's name and keys)."""
FSDP_SECTION = "fsdp_config"
"""The YAML mapping that holds FSDP's options, under Accelerate's keys (fsdp_auto_wrap_policy, ...)."""
PARALLELISM_SECTION = "parallelism_config"
"""The YAML mapping that holds ParallelismConfig's sizes under Accelerate's keys (parallelism_config_tp_size, ...)."""
ACCELERATE_TOP_LEVEL_NAMES = frozenset({"mixed_precision", "use_cpu", "gradient_accumulation_steps", "use_fsdp"})
"""The settings outside a section that Accelerate's Accelerator also reads from the environment, as ACCELERATE_<NAME>;
of the sections it reads every dynamo_config, fsdp_config and parallelism_config key, and the DeepSpeed table's."""
ACCELERATE_FSDP_SPELLINGS = {"fsdp_transformer_layer_cls_to_wrap": "FSDP_TRANSFORMER_CLS_TO_WRAP"}
"""Where Accelerate's FSDP variable is not the fsdp_config key in capitals."""


def accelerate_variable(name: str, section: str | None) -> str | None:
    """The variable through which `accelerate launch` hands the setting `name` (in YAML `section`) to a script,
    or None where Accelerate's Accelerator reads none.

    Example: `accelerate_variable("mixed_precision", None)` is "ACCELERATE_MIXED_PRECISION",
    `accelerate_variable("fsdp_offload_params", "fsdp_config")` is "FSDP_OFFLOAD_PARAMS".
    """
    if name in ACCELERATE_DEEPSPEED_SPELLINGS:
        return ACCELERATE_DEEPSPEED_SPELLINGS[name]
    if section == FSDP_SECTION:
        return ACCELERATE_FSDP_SPELLINGS.get(name, name.upper())
    if section == PARALLELISM_SECTION:
        return name.upper()  # PARALLELISM_CONFIG_TP_SIZE, ... (ParallelismConfig reads them)
    if section == DYNAMO_SECTION or name in ACCELERATE_TOP_LEVEL_NAMES:
        return ACCELERATE_PREFIX + name.upper()
    return None
