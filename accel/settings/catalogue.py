"""The catalogue: every setting accel has, each a `Setting` (accel/settings/setting.py) whose one name gives its
YAML key, `accel launch` flag, ACCEL_* variable and keyword.

The FP8 recipe's settings are derived from the fields of FP8RecipeKwargs: field `f`
is the YAML key `fp8_config: {f: ...}`, the flag `--fp8_f`, the variable `ACCEL_FP8_F` and the
keyword `FP8RecipeKwargs(f=...)`. The quantization settings derive the same way from the fields
of BitsandbytesKwargs (`bnb_config: {mode: ...}`, `--bnb_mode`, ACCEL_BNB_MODE). FSDP's are
Accelerate's keys: `use_fsdp` (an Accelerate config's `distributed_type: FSDP`) and, under
`fsdp_config:`, `fsdp_auto_wrap_policy` and the rest, each also the flag and ACCEL_ variable stem,
with FullyShardedDataParallelPlugin's field as keyword. DeepSpeed's table is accel/settings/deepspeed_names.py;
Accelerate's launcher's spellings of the settings (ACCELERATE_MIXED_PRECISION, FSDP_*, ...) are
accel/settings/accelerate_names.py.

`Setting`, the kinds of value (accel/settings/kinds.py) and the section names are importable from here
too. Torch-free, so that the command line can share it.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

from accel.backends.names import CANONICAL_PRECISIONS
from accel.kwargs_handlers.bitsandbytes import BNB_MODES, BitsandbytesKwargs
from accel.kwargs_handlers.dynamo import DYNAMO_BACKENDS, DYNAMO_MODES
from accel.kwargs_handlers.fp8 import (
    AMAX_COMPUTE_ALGOS,
    BACKWARD_OVERRIDES,
    BASE_PRECISIONS,
    FP8_BACKENDS,
    FP8_FORMATS,
    OPTIMIZATION_LEVELS,
    SCALINGS,
    FP8RecipeKwargs,
)
from accel.kwargs_handlers.fsdp_names import CONFIG_HELP, CONFIG_KEYS, STATE_DICT_TYPES, WRAP_POLICIES
from accel.kwargs_handlers.monitoring import SPIKE_ACTIONS
from accel.settings.accelerate_names import (
    ACCELERATE_FSDP_SPELLINGS,
    ACCELERATE_PREFIX,  # noqa: F401 - importable from here, as before Accelerate's spellings had their own module
    ACCELERATE_TOP_LEVEL_NAMES,
    DYNAMO_SECTION,
    FSDP_SECTION,
    PARALLELISM_SECTION,
)
from accel.settings.deepspeed_names import ACCELERATE_SPELLINGS as ACCELERATE_DEEPSPEED_SPELLINGS  # noqa: F401 - importable here
from accel.settings.deepspeed_names import DEEPSPEED_SECTION
from accel.settings.deepspeed_names import TABLE as DEEPSPEED_TABLE
from accel.settings.deepspeed_names import USE_HELP as DEEPSPEED_USE_HELP
from accel.settings.kinds import (  # re-exported: the kinds are part of the schema's vocabulary
    BlocksKind,
    BoolKind,
    CheckpointPolicyKind,
    ChoiceKind,
    DtypeKind,
    FloatKind,
    FsdpVersionKind,
    GpuIdsKind,
    IntKind,
    Kind,
    NamesKind,
    PatternsKind,
    PrecisionKind,
    TextKind,
    parse_bool,  # noqa: F401 - importable from here, as before the kinds had their own module
)
from accel.settings.setting import (
    BNB_SECTION,
    ENV_PREFIX,  # noqa: F401 - importable from here, as before Setting had its own module
    FP8_SECTION,
    Setting,
)

RECIPE_PRECISION = "fp8"
"""The precision that reads the fp8_config section."""
FP8_PREFIX = "fp8_"
"""The prefix that turns an FP8RecipeKwargs field into a setting name (flag and env var stem)."""
BNB_PREFIX = "bnb_"
"""The prefix that turns a BitsandbytesKwargs field into a setting name: mode -> --bnb_mode, ACCEL_BNB_MODE."""

MIXED_PRECISION = Setting(
    "mixed_precision", PrecisionKind(), "no", keyword="mixed_precision",
    help="precision to train in: " + ", ".join(CANONICAL_PRECISIONS) + " (or an alias such as bf16-mixed)",
)
USE_CPU = Setting("use_cpu", BoolKind(), False, keyword="cpu", flag="cpu", help="train on the CPU even if a GPU is present")
GRADIENT_ACCUMULATION_STEPS = Setting(
    "gradient_accumulation_steps", IntKind(minimum=1), 1, keyword="gradient_accumulation_steps",
    help="micro-batches per optimizer step",
)
NUM_PROCESSES = Setting("num_processes", IntKind(minimum=1), 1, help="training processes in all, over all machines")
NUM_MACHINES = Setting("num_machines", IntKind(minimum=1), 1, help="machines taking part")
MACHINE_RANK = Setting("machine_rank", IntKind(minimum=0), 0, help="this machine's index, 0 to num_machines - 1")
MAIN_PROCESS_IP = Setting("main_process_ip", TextKind(), None, help="address of machine 0 (several machines)")
MAIN_PROCESS_PORT = Setting(
    "main_process_port", IntKind(minimum=1, maximum=65535), None,
    help="port on machine 0 for the rendezvous (one machine: a free port when not given)",
)
GPU_IDS = Setting("gpu_ids", GpuIdsKind(), "all", help="GPUs to use on this machine: all, or indices such as 0,1")
COLLECTIVE_TIMEOUT = Setting(
    "collective_timeout", IntKind(minimum=1), None, help="seconds a collective (all-reduce, barrier, ...) waits "
    "for every process before failing (default 1800); InitProcessGroupKwargs(timeout=) in the script wins",
)
RANK_EXIT_GRACE = Setting(
    "rank_exit_grace", IntKind(minimum=1), None,
    help="seconds the other processes may run on after one has exited before accel launch stops them (default 30)",
)
STALL_REPORT_AFTER = Setting(
    "stall_report_after", IntKind(minimum=0), None, help="seconds some processes wait in a collective that another "
    "has not joined before accel launch prints where that one is (its stack); 0: never (default 60)",
)
MAX_RESTARTS = Setting("max_restarts", IntKind(minimum=0), None, help="times every process is restarted after one "
                       "fails (torchrun's --max_restarts; default 0); the script resumes with load_state()")
MONITOR_INTERVAL = Setting("monitor_interval", FloatKind(minimum=0.01), None, help="seconds between the launcher's "
                           "checks of its processes (torchrun's --monitor_interval; default 0.1)")
RDZV_BACKEND = Setting("rdzv_backend", ChoiceKind(("static", "c10d")), None, help="how the machines meet: static "
                       "(default: fixed machine ranks) or c10d (elastic: restarts across machines, min_machines)")
RDZV_ENDPOINT = Setting("rdzv_endpoint", TextKind(accepted="HOST:PORT"), None, help="c10d rendezvous address "
                        "(default main_process_ip:main_process_port)")
RDZV_TIMEOUT = Setting("rdzv_timeout", IntKind(minimum=1), None, help="seconds a machine waits for the others to "
                       "join before the launch fails, naming the missing ones (default 300)")
MIN_MACHINES = Setting("min_machines", IntKind(minimum=1), None, help="elastic (rdzv_backend c10d): start once this "
                       "many machines joined, up to num_machines (torchrun's --nnodes MIN:MAX)")
ELASTIC_SETTINGS = (MAX_RESTARTS, MONITOR_INTERVAL, RDZV_BACKEND, RDZV_ENDPOINT, RDZV_TIMEOUT, MIN_MACHINES)
"""torchrun's restart and rendezvous settings (Accelerate's keys where it has them)."""
SCHEDULER_PER_OPTIMIZER_STEP = Setting(
    "scheduler_per_optimizer_step", BoolKind(), False, keyword="scheduler_per_optimizer_step",
    help="step a prepared scheduler once per optimizer step that really happened, whatever the number of processes "
    "(default false: Accelerate's count, once per process per optimizer step, once under split_batches)",
)
ASYNC_SAVE = Setting("async_save", BoolKind(), False, help="save_state writes checkpoints in a background thread "
                     "(ProjectConfiguration.async_save; save_state(async_save=) per call)")
ACTIVATION_CHECKPOINTING = Setting(
    "activation_checkpointing", BlocksKind(), False, keyword="activation_checkpointing",
    help="recompute each block's activations in backward instead of keeping them: true (the model's repeated blocks) "
    "or the blocks' class names",
)
ACTIVATION_CHECKPOINTING_POLICY = Setting(
    "activation_checkpointing_policy", CheckpointPolicyKind(), "full", keyword="activation_checkpointing_policy",
    help="how the checkpointed blocks recompute: full (every activation), selective (keep matmul, attention and "
    "communication outputs but every second matmul: torchtitan's policy) or a memory budget 0..1 (the fraction of "
    "blocks left unchecked); docs/long-context.md",
)
LOG_THROUGHPUT = Setting("log_throughput", BoolKind(), None, help="measure samples/s, tokens/s, step time and MFU and "
                         "log them with accelerator.log (ThroughputKwargs in the script sets the details; docs/tracking.md)")
SPIKE_DETECTION = Setting("spike_detection", ChoiceKind(SPIKE_ACTIONS, optional=True), None, help="on a loss spike: "
                          "log it, save a checkpoint first (checkpoint) or stop the run (SpikeDetectionKwargs sets the rule)")
MEMORY_SNAPSHOT_ON_OOM = Setting(
    "memory_snapshot_on_oom", BoolKind(), None, help="on CUDA: record the allocator's history and, when a process runs "
    "out of GPU memory, write memory_snapshots/oom-rank<R>.pickle and name it in the error (docs/memory.md)",
)
ACCELERATOR_SETTINGS = (
    MIXED_PRECISION, USE_CPU, GRADIENT_ACCUMULATION_STEPS, SCHEDULER_PER_OPTIMIZER_STEP, ACTIVATION_CHECKPOINTING,
    ACTIVATION_CHECKPOINTING_POLICY,
)
"""Settings the Accelerator reads (keyword, else ACCEL_<NAME>, else default)."""
LAUNCHER_SETTINGS = (
    NUM_PROCESSES, NUM_MACHINES, MACHINE_RANK, MAIN_PROCESS_IP, MAIN_PROCESS_PORT, GPU_IDS, RANK_EXIT_GRACE,
    STALL_REPORT_AFTER, *ELASTIC_SETTINGS,
)
"""Settings that decide how `accel launch` starts processes."""
TOP_LEVEL_SETTINGS = (
    MIXED_PRECISION, NUM_PROCESSES, NUM_MACHINES, MACHINE_RANK, MAIN_PROCESS_IP, MAIN_PROCESS_PORT,
    USE_CPU, GPU_IDS, GRADIENT_ACCUMULATION_STEPS, COLLECTIVE_TIMEOUT, RANK_EXIT_GRACE, STALL_REPORT_AFTER,
    SCHEDULER_PER_OPTIMIZER_STEP, ACTIVATION_CHECKPOINTING, ACTIVATION_CHECKPOINTING_POLICY, LOG_THROUGHPUT,
    SPIKE_DETECTION, MEMORY_SNAPSHOT_ON_OOM, ASYNC_SAVE,
    *ELASTIC_SETTINGS,
)
"""Top-level keys of config.yaml, in the order they are written."""

_RECIPE_CHOICES: dict[str, tuple[str, ...]] = {
    "backend": FP8_BACKENDS,
    "fp8_format": FP8_FORMATS,
    "amax_compute_algo": AMAX_COMPUTE_ALGOS,
    "scaling": SCALINGS,
    "backward_override": BACKWARD_OVERRIDES,
    "optimization_level": OPTIMIZATION_LEVELS,
    "base_precision": BASE_PRECISIONS,
}
"""The accepted values of FP8RecipeKwargs' string fields (for prompts and help; it validates itself)."""


def _recipe_kind(field: str, annotation: Any) -> Kind:
    """The kind of an FP8RecipeKwargs field, from its type annotation."""
    if annotation is bool:
        return BoolKind()
    if annotation in (int, int | None):
        return IntKind()
    if annotation == tuple[str, ...]:
        return PatternsKind()
    if annotation in (str, str | None) and field in _RECIPE_CHOICES:
        return ChoiceKind(_RECIPE_CHOICES[field], optional=annotation is not str)
    raise TypeError(f"FP8RecipeKwargs.{field}: no setting kind for the annotation {annotation!r}")


def _recipe_settings() -> tuple[Setting, ...]:
    """One setting per FP8RecipeKwargs field, under fp8_config in YAML.

    Its name is fp8_<field>, without a doubled prefix: the field fp8_format gives
    `--fp8_format` and ACCEL_FP8_FORMAT (Accelerate's spellings), not ACCEL_FP8_FP8_FORMAT.
    """
    hints = typing.get_type_hints(FP8RecipeKwargs)
    return tuple(
        Setting(
            FP8_PREFIX + field.name.removeprefix(FP8_PREFIX), _recipe_kind(field.name, hints[field.name]), field.default,
            keyword=field.name, section=FP8_SECTION,
        )
        for field in dataclasses.fields(FP8RecipeKwargs)
    )


FP8_SETTINGS = _recipe_settings()
"""The recipe's settings, in FP8RecipeKwargs' field order."""
DYNAMO_BACKEND = Setting(
    "dynamo_backend", ChoiceKind(DYNAMO_BACKENDS), "no", keyword="dynamo_backend", section=DYNAMO_SECTION,
    help="compile prepared models with torch.compile and this backend (no: do not compile; inductor: torch's compiler)",
)
DYNAMO_MODE = Setting(
    "dynamo_mode", ChoiceKind(DYNAMO_MODES), "default", section=DYNAMO_SECTION,
    help="torch.compile mode (inductor only): " + ", ".join(DYNAMO_MODES),
)
DYNAMO_USE_FULLGRAPH = Setting(
    "dynamo_use_fullgraph", BoolKind(), False, section=DYNAMO_SECTION,
    help="compile each model as one graph: raise at a graph break instead of splitting there",
)
DYNAMO_USE_DYNAMIC = Setting(
    "dynamo_use_dynamic", BoolKind(), None, section=DYNAMO_SECTION,
    help="compile for dynamic shapes (true) or static ones (false); unset lets torch decide",
)
DYNAMO_USE_REGIONAL_COMPILATION = Setting(
    "dynamo_use_regional_compilation", BoolKind(), False, section=DYNAMO_SECTION,
    help="compile each repeated block (and each other part) on its own, not the whole model: shorter compile",
)
DYNAMO_SETTINGS = (DYNAMO_BACKEND, DYNAMO_MODE, DYNAMO_USE_FULLGRAPH, DYNAMO_USE_DYNAMIC, DYNAMO_USE_REGIONAL_COMPILATION)
"""torch.compile's settings, under dynamo_config in YAML; TorchDynamoPlugin's fields backend, mode, fullgraph,
dynamic and use_regional_compilation (read by the Accelerator where the script leaves them unset)."""
DYNAMO_SETTINGS_BY_KEY = {setting.yaml_key: setting for setting in DYNAMO_SETTINGS}
USE_FSDP = Setting(
    "use_fsdp", BoolKind(), False,
    help="shard models with FSDP2 (torch's fully_shard) instead of DDP; the fsdp_config keys say how "
    "(an Accelerate config's distributed_type: FSDP)",
)
_FSDP_KINDS: dict[str, tuple[Kind, Any]] = {
    "fsdp_version": (FsdpVersionKind(), 2),
    "fsdp_auto_wrap_policy": (ChoiceKind(WRAP_POLICIES, optional=True), None),
    "fsdp_transformer_layer_cls_to_wrap": (NamesKind(), None),
    "fsdp_min_num_params": (IntKind(minimum=1), None),
    "fsdp_reshard_after_forward": (BoolKind(), True),
    "fsdp_offload_params": (BoolKind(), False),
    "fsdp_state_dict_type": (ChoiceKind(STATE_DICT_TYPES), "SHARDED_STATE_DICT"),
    "fsdp_activation_checkpointing": (BoolKind(), False),
    "fsdp_activation_checkpointing_offload": (BoolKind(), False),
    "fsdp_cpu_ram_efficient_loading": (BoolKind(), False),
}
"""Each fsdp_config key's kind and default (FullyShardedDataParallelPlugin's defaults)."""
FSDP_OPTION_SETTINGS = tuple(
    Setting(key, *_FSDP_KINDS[key], keyword=field, help=CONFIG_HELP[key], section=FSDP_SECTION)
    for key, field in CONFIG_KEYS.items()
)
"""The fsdp_config keys: YAML key, flag stem and ACCEL_ variable are Accelerate's key; keyword is the plugin's field."""
FSDP_SETTINGS = (USE_FSDP, *FSDP_OPTION_SETTINGS)
FSDP_SETTINGS_BY_KEY = {setting.yaml_key: setting for setting in FSDP_OPTION_SETTINGS}


def _bnb_settings() -> tuple[Setting, ...]:
    """One setting per BitsandbytesKwargs field, under bnb_config in YAML: mode -> --bnb_mode, ACCEL_BNB_MODE."""
    kinds: dict[str, Kind] = {"mode": ChoiceKind(BNB_MODES), "dtype": DtypeKind(), "ignore_modules": PatternsKind()}
    return tuple(
        Setting(BNB_PREFIX + field.name, kinds[field.name], field.default, keyword=field.name, section=BNB_SECTION)
        for field in dataclasses.fields(BitsandbytesKwargs)
    )


BNB_SETTINGS = _bnb_settings()
"""The quantization settings, in BitsandbytesKwargs' field order; setting any of them turns quantization on."""
BNB_SETTINGS_BY_KEY = {setting.yaml_key: setting for setting in BNB_SETTINGS}
_PARALLELISM_SIZES = {
    "dp_replicate_size": "replicas of the (sharded) model", "dp_shard_size": "processes FSDP2 shards over (use_fsdp)",
    "tp_size": "processes splitting each layer (tensor parallel)",
    "cp_size": "processes splitting each sequence with ring attention (CUDA only; docs/long-context.md)",
    "sp_size": "processes splitting each sequence (Ulysses; docs/long-context.md)",
}
PARALLELISM_SIZE_SETTINGS = tuple(
    Setting(f"{PARALLELISM_SECTION}_{size}", IntKind(minimum=1), None, keyword=size, section=PARALLELISM_SECTION,
            help=f"ParallelismConfig.{size}: {what}; the sizes multiply to num_processes")
    for size, what in _PARALLELISM_SIZES.items()
)
"""ParallelismConfig's sizes: any one set builds a device mesh (docs/distributed.md)."""
SP_BACKENDS = ("torch", "deepspeed")
"""ParallelismConfig.sp_backend's values: accel's Ulysses (accel.parallel.sequence), DeepSpeed's (refused at construction)."""
SP_BACKEND = Setting(f"{PARALLELISM_SECTION}_sp_backend", ChoiceKind(SP_BACKENDS), None, keyword="sp_backend",
                     section=PARALLELISM_SECTION, help="ParallelismConfig.sp_backend: torch (accel's Ulysses, the "
                     "default) or deepspeed (refused: docs/long-context.md)")
PARALLELISM_SETTINGS = (*PARALLELISM_SIZE_SETTINGS, SP_BACKEND)
"""Every parallelism_config setting: the sizes and the sequence-parallel backend."""
PARALLELISM_SETTINGS_BY_KEY = {setting.yaml_key: setting for setting in PARALLELISM_SETTINGS}
USE_DEEPSPEED = Setting("use_deepspeed", BoolKind(), False, help=DEEPSPEED_USE_HELP)
DEEPSPEED_OPTION_SETTINGS = tuple(Setting(key, kind, default, keyword=field, help=text, section=DEEPSPEED_SECTION)
                                  for key, (kind, default, field, text) in DEEPSPEED_TABLE.items())
"""The deepspeed_config keys (accel/settings/deepspeed_names.py); keyword is the DeepSpeedPlugin field."""
DEEPSPEED_SETTINGS = (USE_DEEPSPEED, *DEEPSPEED_OPTION_SETTINGS)
DEEPSPEED_SETTINGS_BY_KEY = {setting.yaml_key: setting for setting in DEEPSPEED_OPTION_SETTINGS}
ALL_SETTINGS = (TOP_LEVEL_SETTINGS + FP8_SETTINGS + DYNAMO_SETTINGS + FSDP_SETTINGS + BNB_SETTINGS + PARALLELISM_SETTINGS
                + DEEPSPEED_SETTINGS)
SETTINGS_BY_NAME = {setting.name: setting for setting in ALL_SETTINGS}
FP8_SETTINGS_BY_KEY = {setting.yaml_key: setting for setting in FP8_SETTINGS}
assert set(_RECIPE_CHOICES) <= set(FP8_SETTINGS_BY_KEY), "a choice list names no FP8RecipeKwargs field"
assert ACCELERATE_TOP_LEVEL_NAMES | set(ACCELERATE_FSDP_SPELLINGS) <= set(SETTINGS_BY_NAME), "an Accelerate name is no setting"


def to_environment(values: Mapping[str, Any]) -> dict[str, str]:
    """The ACCEL_* variables for `values` (setting name -> canonical value); None values are left out."""
    return {
        SETTINGS_BY_NAME[name].env_var: SETTINGS_BY_NAME[name].format(value)
        for name, value in values.items()
        if value is not None
    }
