"""The questions of `accel config`: one function per group, each returning its part of the answers.

Answers are a dict of setting name -> canonical value, the same shape a loaded config has. Only
what matters on this machine is asked: no GPU questions without a GPU, no rendezvous questions
for one machine, the FP8 recipe only for fp8, FSDP and the device mesh only for several processes
(wizard_fsdp.py, wizard_parallel.py), DeepSpeed for several processes without FSDP (wizard_deepspeed.py),
and bitsandbytes modes only where they run (wizard_bnb.py). An existing config's values are the defaults.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from accel.backends.names import CANONICAL_PRECISIONS
from accel.cli import capabilities
from accel.cli.config.prompts import Option, ask_select, ask_text, ask_yes_no, short_reason
from accel.cli.config.wizard_bnb import ask_quantization
from accel.cli.config.wizard_deepspeed import ask_deepspeed
from accel.cli.config.wizard_dynamo import ask_dynamo
from accel.cli.config.wizard_fsdp import ask_fsdp
from accel.cli.config.wizard_parallel import ask_parallelism
from accel.cli.config.wizard_recipe import SLOW_MARK, ask_recipe
from accel.cli.launch.plan import DEFAULT_PORT
from accel.settings import (
    GPU_IDS,
    GRADIENT_ACCUMULATION_STEPS,
    MACHINE_RANK,
    MAIN_PROCESS_IP,
    MAIN_PROCESS_PORT,
    MIXED_PRECISION,
    NUM_MACHINES,
    NUM_PROCESSES,
    RECIPE_PRECISION,
    SETTINGS_BY_NAME,
    USE_CPU,
    USE_DEEPSPEED,
    USE_FSDP,
    Setting,
)

Answers = dict[str, Any]

FSDP_VERSION = SETTINGS_BY_NAME["fsdp_version"]

PRECISION_TITLES = {
    "no": "fp32 weights and compute",
    "fp16": "fp32 weights, fp16 autocast with loss scaling",
    "bf16": "fp32 weights, bf16 autocast",
    "fp8": "FP8 matrix products through an FP8 backend",
    "16-true": "weights and compute in fp16",
    "bf16-true": "weights and compute in bf16",
    "64-true": "weights and compute in fp64",
}
"""What each precision means, for the menu (the names come from the precision table)."""


@dataclasses.dataclass(frozen=True)
class Machine:
    """What this machine has, which decides the questions."""

    gpus: int
    cores: int


def _current(current: Mapping[str, Any], setting: Setting) -> Any:
    return current.get(setting.name, setting.default)


def ask_machines(current: Mapping[str, Any]) -> Answers:
    """How many machines; for several, this one's rank and the main machine's address and port."""
    machines = ask_text(NUM_MACHINES, "How many machines will train together?", _current(current, NUM_MACHINES))
    answers: Answers = {NUM_MACHINES.name: machines}
    if machines == 1:
        return answers
    answers[MACHINE_RANK.name] = ask_text(
        MACHINE_RANK, f"Which machine is this one (0 is the main machine, up to {machines - 1})?",
        min(_current(current, MACHINE_RANK), machines - 1),
        check=lambda rank: None if rank < machines else f"machine_rank must be 0 to {machines - 1}",
    )
    answers[MAIN_PROCESS_IP.name] = ask_text(
        MAIN_PROCESS_IP, "IP address or host name of the main machine (machine 0)?", _current(current, MAIN_PROCESS_IP)
    )
    answers[MAIN_PROCESS_PORT.name] = ask_text(
        MAIN_PROCESS_PORT, "Port on the main machine for the rendezvous?", _current(current, MAIN_PROCESS_PORT) or DEFAULT_PORT
    )
    return answers


def ask_devices(machine: Machine, current: Mapping[str, Any], machines: int) -> Answers:
    """CPU or GPUs (asked only where there is a GPU), and how many processes on each machine."""
    use_cpu = machine.gpus == 0 or ask_yes_no("Train on the CPU only, ignoring the GPUs?", _current(current, USE_CPU))
    answers: Answers = {USE_CPU.name: use_cpu}
    slots = machine.cores
    if not use_cpu:
        gpu_ids = ask_text(GPU_IDS, f"Which GPUs should this machine use ({machine.gpus} here: all, or ids such as 0,1)?",
                           _current(current, GPU_IDS), check=lambda ids: _gpu_ids_problem(ids, machine.gpus))
        answers[GPU_IDS.name] = gpu_ids
        slots = machine.gpus if gpu_ids == "all" else len(gpu_ids.split(","))
    what = "CPU cores" if use_cpu else "GPUs chosen"
    previous = current[NUM_PROCESSES.name] // machines if NUM_PROCESSES.name in current else (1 if use_cpu else slots)
    per_machine = ask_text(
        NUM_PROCESSES, f"How many training processes on each machine ({slots} {what} here)?",
        max(1, min(previous, slots)),
        check=lambda n: None if use_cpu or n <= slots else f"at most {slots}: one process per GPU",
    )
    if use_cpu and per_machine > slots:
        print(f"  note: {per_machine} processes on {slots} CPU cores share the cores: each runs slower, and torch's "
              "threads wait on each other (set OMP_NUM_THREADS=1 when launching); it runs as asked.")
    answers[NUM_PROCESSES.name] = per_machine * machines
    return answers


def _gpu_ids_problem(gpu_ids: str, gpus: int) -> str | None:
    if gpu_ids == "all":
        return None
    missing = [i for i in gpu_ids.split(",") if int(i) >= gpus]
    return f"no GPU {missing[0]} here (ids 0 to {gpus - 1})" if missing else None


def say_checking(answers: Mapping[str, Any]) -> None:
    """Say what is checked next, before it starts: loading torch and trying every precision and FP8
    backend on the training device takes seconds (ten on a busy machine) with nothing else to show."""
    gpu_ids = answers.get(GPU_IDS.name, GPU_IDS.default)
    where = "the CPU" if answers[USE_CPU.name] else ("the GPUs" if gpu_ids == "all" else f"GPU {gpu_ids.split(',')[0]}")
    print(f"Checking which precisions and FP8 backends run on {where} (each is tried; a few seconds)...", flush=True)


def ask_precision(current: Mapping[str, Any], device: Any) -> Answers:
    """Which precision; those that cannot run on `device` are shown with the reason and cannot be chosen."""
    status = capabilities.precision_status(device)
    status[RECIPE_PRECISION] = _fp8_unavailable(device)
    options = []
    for name in CANONICAL_PRECISIONS:
        slow = _speed_note(name, device) if status[name] is None else None
        title = f"{name:<10} {PRECISION_TITLES.get(name, '')}" + (SLOW_MARK if slow else "")
        options.append(Option(name, title, short_reason(status[name])))
    precision = ask_select("Which precision should training run in?", options, _current(current, MIXED_PRECISION))
    note = _speed_note(precision, device)
    if note:
        print(f"  note: {precision} will be slow: {note}.")
    return {MIXED_PRECISION.name: precision}


def _speed_note(precision: str, device: Any) -> str | None:
    """Why `precision` is slow here; for fp8 nothing yet: its base precision, asked next, decides."""
    return None if precision == RECIPE_PRECISION else capabilities.speed_note(precision, device)


def _fp8_unavailable(device: Any) -> str | None:
    runnable = [name for name, reason in capabilities.fp8_backend_status(device).items() if reason is None]
    return None if runnable else "no FP8 backend can run here (see `accel env`)"


def ask_training(current: Mapping[str, Any]) -> Answers:
    """Training-loop settings: gradient accumulation, kept out of the answers when it is the default."""
    steps = ask_text(GRADIENT_ACCUMULATION_STEPS, "Gradient accumulation steps (micro-batches per optimizer step)?",
                     _current(current, GRADIENT_ACCUMULATION_STEPS))
    return unless_default(GRADIENT_ACCUMULATION_STEPS, steps)


def unless_default(setting: Setting, value: Any) -> Answers:
    """`{setting: value}`, or nothing when `value` is the setting's default.

    For settings a script also sets in its code: an absent key sets no ACCEL_* variable at launch, so the
    Accelerator takes the script's value (or the same default) without a warning that a written default
    "overrides" it on every process.
    """
    return {} if value == setting.default else {setting.name: value}


def ask_fsdp_where_it_runs(current: Mapping[str, Any], answers: Mapping[str, Any]) -> Answers:
    """FSDP's questions, unless the answers so far cannot train sharded (an FP8 recipe whose storage
    fully_shard cannot shard, say): then not asked, and why said, instead of a refusal after the last answer."""
    reason = sharding_problem(answers)
    if reason is not None:
        print(f"  FSDP: not asked, {reason}")
        return {}
    return ask_fsdp(current, answers[NUM_PROCESSES.name], on_gpus=not answers[USE_CPU.name])


def sharding_problem(answers: Mapping[str, Any]) -> str | None:
    """Why the configuration `answers` cannot run under FSDP2 on this machine (the check `accel launch`
    runs, with use_fsdp added), in one sentence; None when it can."""
    from accel.cli.config.check import check_values
    from accel.cli.errors import CliError

    try:
        check_values({**answers, USE_FSDP.name: True, FSDP_VERSION.name: 2})
    except CliError as error:
        reason = str(error).split(": ", 1)[-1]  # after "this configuration cannot run on cpu"
        return reason.split(". ")[0].rstrip(".")
    return None


def ask_all(machine: Machine, current: Mapping[str, Any]) -> Answers:
    """Every question group in order; the answers, ready to write as config.yaml."""
    answers = ask_machines(current)
    answers.update(ask_devices(machine, current, answers[NUM_MACHINES.name]))
    say_checking(answers)
    device = capabilities.training_device(answers[USE_CPU.name], answers.get(GPU_IDS.name, GPU_IDS.default))
    answers.update(ask_precision(current, device))
    if answers[MIXED_PRECISION.name] == RECIPE_PRECISION:
        answers.update(ask_recipe(current, device))
    if answers[NUM_PROCESSES.name] > 1:
        answers.update(ask_fsdp_where_it_runs(current, answers))
        answers.update(ask_deepspeed(current, answers, device))
    deepspeed = bool(answers.get(USE_DEEPSPEED.name))
    if deepspeed:
        print("  device mesh, bitsandbytes and torch.compile: not asked, DeepSpeed's engine runs none of them")
    elif answers[NUM_PROCESSES.name] > 1:
        answers.update(ask_parallelism(current, answers[NUM_PROCESSES.name], answers))
    if not deepspeed:
        answers.update(ask_quantization(current, device, answers))
    answers.update(ask_training(current))
    if not deepspeed:
        answers.update(ask_dynamo(current, device))
    return answers
