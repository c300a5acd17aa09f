"""Decide what `accel launch` runs: flags over the config file over the defaults, checked once.

The result, a LaunchPlan, says how many processes on how many machines, on CPU or GPU, and the
environment the script gets. Anything that cannot work is refused here with the reason, before
a process starts.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from accel.backends.names import reads_fp8_recipe
from accel.cli.config.file import ConfigFile
from accel.cli.errors import CliError, warn
from accel.cli.launch.rendezvous import DEFAULT_PORT, check_rendezvous  # noqa: F401 - DEFAULT_PORT: the wizard's
from accel.parallel.config import CP_REASON, SP_REASON, check_world
from accel.settings import (
    DEEPSPEED_OPTION_SETTINGS,
    FP8_SETTINGS,
    FSDP_OPTION_SETTINGS,
    LAUNCHER_SETTINGS,
    MIXED_PRECISION,
    PARALLELISM_SETTINGS,
    RECIPE_PRECISION,
    SETTINGS_BY_NAME,
    USE_CPU,
    USE_DEEPSPEED,
    USE_FSDP,
    Setting,
    to_environment,
)


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    """What to start: the settings in force, the process layout and the script's environment."""

    values: dict[str, Any]
    processes_per_machine: int
    use_cpu: bool
    env: dict[str, str]

    def get(self, name: str) -> Any:
        """The value in force for setting `name` (given, else its default)."""
        return self.values.get(name, SETTINGS_BY_NAME[name].default)

    @property
    def distributed(self) -> bool:
        """Whether torch.distributed.run starts the processes (more than one, several machines, or restarts)."""
        elastic = (self.get("max_restarts") or 0) > 0 or self.get("rdzv_backend") == "c10d"
        return self.processes_per_machine > 1 or self.get("num_machines") > 1 or elastic


def plan_launch(
    flags: Mapping[str, Any], config: ConfigFile, command: str, gpus: Callable[[], int], cores: int
) -> LaunchPlan:
    """Merge `flags` over `config`, check the world size, and build the script's environment.

    `gpus` is called only when the answer matters (it imports torch).
    """
    values = merged_settings(flags, config, command)
    per_machine = _processes_per_machine(values)
    use_cpu = _decide_device(values, per_machine, gpus, command)
    plan = LaunchPlan(values, per_machine, use_cpu, {})
    return dataclasses.replace(plan, env=_environment(plan, cores))


def merged_settings(flags: Mapping[str, Any], config: ConfigFile, command: str) -> dict[str, Any]:
    """The settings in force: `flags` over `config`, without what nothing reads, the machines and the sizes
    checked (what does not depend on this machine's devices: `accel launch --dry_run` plans with it too)."""
    values = _without_unused_fsdp(_merge(flags, config, command), flags, config, command)
    values = _without_unused_deepspeed(values, flags, config, command)
    _processes_per_machine(values)
    _check_parallelism(values)
    return values


def _merge(flags: Mapping[str, Any], config: ConfigFile, command: str) -> dict[str, Any]:
    """Flags over the config file; recipe values only when the precision in force reads them."""
    values = {**config.values, **flags}
    precision = values.get(MIXED_PRECISION.name, MIXED_PRECISION.default)
    if reads_fp8_recipe(precision):
        return values
    refuse_recipe_flags(flags, precision)
    return _without_unread(values, config, command, FP8_SETTINGS, f"mixed_precision is {precision!r}")


def refuse_recipe_flags(flags: Mapping[str, Any], precision: str) -> None:
    """Refuse --fp8_* flags for a precision other than fp8: nothing would read them."""
    if not reads_fp8_recipe(precision):
        _refuse_unread_flags(
            flags, FP8_SETTINGS, f"set the FP8 recipe, which only mixed_precision {RECIPE_PRECISION!r} reads, but "
            f"mixed_precision is {precision!r}; add --mixed_precision fp8 or drop them",
        )


def _without_unused_fsdp(
    values: dict[str, Any], flags: Mapping[str, Any], config: ConfigFile, command: str
) -> dict[str, Any]:
    """The fsdp_config options only when use_fsdp is on (else refused as flags, or named as unused).

    use_fsdp with one process is passed on without a word here: the script's Accelerator says that
    there is nothing to shard when it prepares the model (accel.fsdp.wrap.shard_model), which a
    plain `python script.py` needs too; saying it here as well would say it twice in a launch.
    """
    if values.get(USE_FSDP.name, USE_FSDP.default):
        return values
    refuse_fsdp_flags(flags, use_fsdp=False)
    return _without_unread(values, config, command, FSDP_OPTION_SETTINGS, "use_fsdp is false")


def _without_unused_deepspeed(
    values: dict[str, Any], flags: Mapping[str, Any], config: ConfigFile, command: str
) -> dict[str, Any]:
    """The deepspeed_config options only with use_deepspeed (else refused as flags, or named as unused); use_deepspeed
    with use_fsdp is refused (two engines for one model)."""
    if values.get(USE_DEEPSPEED.name, False):
        if values.get(USE_FSDP.name, False):
            raise CliError("use_deepspeed and use_fsdp are both on: each shards the model with its own engine; keep one")
        return values
    _refuse_unread_flags(flags, DEEPSPEED_OPTION_SETTINGS, "set DeepSpeed options, which only apply with "
                         "use_deepspeed, but use_deepspeed is false; add --use_deepspeed or drop them")
    return _without_unread(values, config, command, DEEPSPEED_OPTION_SETTINGS, "use_deepspeed is false")


def refuse_fsdp_flags(flags: Mapping[str, Any], use_fsdp: bool) -> None:
    """Refuse --fsdp_* flags without use_fsdp: nothing would read them."""
    if not use_fsdp:
        _refuse_unread_flags(
            flags, FSDP_OPTION_SETTINGS,
            "set FSDP options, which only apply with use_fsdp, but use_fsdp is false; add --use_fsdp or drop them",
        )


def _refuse_unread_flags(flags: Mapping[str, Any], settings: Sequence[Setting], reason: str) -> None:
    """CliError naming the flags of `settings` given in `flags`, which nothing would read, and `reason`."""
    given = [s.flags[0] for s in settings if s.name in flags]
    if given:
        raise CliError(f"conflicting flags: {', '.join(given)} {reason}")


def _without_unread(
    values: dict[str, Any], config: ConfigFile, command: str, settings: Sequence[Setting], reason: str
) -> dict[str, Any]:
    """`values` without `settings`, which nothing reads (`reason`); those from the config file named in one warning."""
    unused = [s.yaml_path for s in settings if s.name in config.values]
    if unused:
        warn(command, f"{', '.join(unused)} from {config.path} not used: {reason}")
    names = {s.name for s in settings}
    return {name: value for name, value in values.items() if name not in names}


def _processes_per_machine(values: Mapping[str, Any]) -> int:
    """Processes on each machine; refuses a layout torchrun cannot start."""
    processes = values.get("num_processes", 1)
    machines = values.get("num_machines", 1)
    rank = values.get("machine_rank", 0)
    if rank >= machines:
        raise CliError(f"machine_rank {rank} is out of range for num_machines {machines}: it must be 0 to {machines - 1}")
    if processes % machines:
        raise CliError(
            f"num_processes {processes} (processes in all) cannot be split evenly over num_machines {machines}; "
            f"use a multiple of {machines}"
        )
    problem = check_rendezvous(dict(values))
    if problem:
        raise CliError(problem)
    if machines > 1 and not values.get("main_process_ip") and not values.get("rdzv_endpoint"):
        raise CliError(f"num_machines {machines} needs main_process_ip: the address of machine 0, which every machine joins")
    return processes // machines


def _check_parallelism(values: Mapping[str, Any]) -> None:
    """Refuse parallelism_config sizes that do not multiply to num_processes, dp_shard_size without use_fsdp,
    cp_size > 1 on CPU processes and DeepSpeed's sequence parallelism, before any process starts (the Accelerator
    checks the same again)."""
    sizes = {s.keyword: values[s.name] for s in PARALLELISM_SETTINGS if s.name in values}
    if not sizes:
        return
    try:
        check_world(sizes, values.get("num_processes", 1), fsdp=bool(values.get(USE_FSDP.name)), where="parallelism_config")
        if sizes.get("cp_size", 1) > 1 and values.get(USE_CPU.name):
            raise ValueError(f"parallelism_config_cp_size={sizes['cp_size']} with use_cpu: {CP_REASON}")
        if sizes.get("sp_size", 1) > 1 and sizes.get("sp_backend") == "deepspeed" and not values.get(USE_DEEPSPEED.name):
            raise ValueError(f"parallelism_config_sp_size={sizes['sp_size']} with sp_backend 'deepspeed': {SP_REASON}")
    except ValueError as error:
        raise CliError(f"{error} (the sizes: the parallelism_config keys or --parallelism_config_* flags)") from None


def _decide_device(values: Mapping[str, Any], per_machine: int, gpus: Callable[[], int], command: str) -> bool:
    """True to train on the CPU; refuses more GPU processes than GPUs, and GPU ids that do not exist.

    Without a GPU, processes run on the CPU, as the Accelerator would choose; asking for
    particular GPUs there is refused instead.
    """
    gpu_ids = values.get("gpu_ids", "all")
    if values.get(USE_CPU.name, False):
        if gpu_ids != "all":
            warn(command, f"gpu_ids {gpu_ids} not used: use_cpu is true")
        return True
    if per_machine == 1 and gpu_ids == "all":
        return False
    available = gpus()
    if available == 0 and gpu_ids == "all":
        return True
    chosen = available if gpu_ids == "all" else _check_gpu_ids(gpu_ids, available)
    if per_machine > chosen:
        raise CliError(
            f"{per_machine} GPU processes per machine but {chosen} GPU(s) to run them (gpu_ids {gpu_ids}, "
            f"{available} visible): use at most {chosen} processes per machine, or --cpu"
        )
    return False


def _check_gpu_ids(gpu_ids: str, available: int) -> int:
    ids = [int(i) for i in gpu_ids.split(",")]
    missing = [i for i in ids if i >= available]
    if missing:
        visible = f"{available} visible: 0 to {available - 1}" if available else "none visible; use --cpu"
        raise CliError(f"gpu_ids {gpu_ids}: no GPU {missing[0]} here ({visible})")
    return len(ids)


def _environment(plan: LaunchPlan, cores: int) -> dict[str, str]:
    """ACCEL_* for every setting given plus every launcher setting in force; device and thread variables."""
    given = {name: value for name, value in plan.values.items() if SETTINGS_BY_NAME[name] not in LAUNCHER_SETTINGS}
    given.update({s.name: plan.get(s.name) for s in LAUNCHER_SETTINGS})
    if plan.use_cpu and plan.distributed:
        given[USE_CPU.name] = True
    env = to_environment(given)
    if not plan.use_cpu and plan.get("gpu_ids") != "all":
        env["CUDA_VISIBLE_DEVICES"] = plan.get("gpu_ids")
    if plan.distributed and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(max(1, cores // plan.processes_per_machine))
    return env

