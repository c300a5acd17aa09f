"""The whole configuration, checked on this machine before anything runs or is written.

`accel launch` and `accel test` (through `check_launch`), `accel config default` and the wizard
(through `check_values`) build the precision backend the script's Accelerator would build, from
the same ACCEL_* variables it would read, on the device it would train on: the precision against
the machine, and for fp8 the recipe against its backend (scaling, fields the backend cannot
honour, base precision) and the backend against the machine; then the bitsandbytes quantizer
(bnb_config) and the FSDP plugin (use_fsdp, fsdp_config) against that precision. That is the
Accelerator's own construction-time check, run once here instead of failing in every process
after they start.

The PrecisionWarnings the check meets (a precision that runs slowly here) are said once, in the
tool's words, and their digests are passed to the processes (accel._warnings.SAID_VARIABLE),
so that no rank repeats them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from accel.cli.errors import CliError, warn
from accel.settings import GPU_IDS, MIXED_PRECISION, PARALLELISM_SETTINGS_BY_KEY, USE_CPU, to_environment
from accel.settings.handlers import fp8_recipe_from_env


def check_launch(plan: Any, command: str) -> dict[str, str]:
    """Refuse (CliError, one line) a launch plan whose configuration cannot run here; say its notes once.

    `plan` is accel.cli.launch.plan.LaunchPlan. The check runs in a short-lived child process
    with the environment the script will have: on a GPU it initialises CUDA, whose context this
    launcher would otherwise keep on the GPU for the whole run. Returns the variables to add to
    the processes' environment: SAID_VARIABLE with the digests of what was said (empty when nothing was).
    Several processes: the torchrun wrapper, which imports torch anyway, runs it (check_here) instead.
    """
    gpu_ids = plan.get(GPU_IDS.name)
    child = [sys.executable, "-m", __name__, "cpu" if plan.use_cpu else "gpu", gpu_ids]
    result = subprocess.run(child, env={**os.environ, **plan.env}, capture_output=True, text=True, check=False)
    answers = [line for line in result.stdout.splitlines() if line.startswith(_ANSWER)]
    if result.returncode != 0 or not answers:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise CliError(f"the configuration check ({' '.join(child[1:])}) failed with status {result.returncode}: {last}")
    return apply_answer(json.loads(answers[-1].removeprefix(_ANSWER)), command)


def apply_answer(answer: Mapping[str, Any], command: str) -> dict[str, str]:
    """Act on a check's `answer`: CliError when it refused; else say its notes once and return the
    variables that tell the processes they were said (accel._warnings.SAID_VARIABLE)."""
    from accel._warnings import SAID_VARIABLE, digest

    if answer["refused"] is not None:
        raise CliError(answer["refused"])
    notes: list[str] = list(answer["notes"])
    for note in notes:
        warn(command, note)
    return {SAID_VARIABLE: ",".join(digest(note) for note in notes)} if notes else {}


def check_here(device: str, gpu_ids: str, command: str) -> dict[str, str]:
    """`check_launch`'s check run by a process that has imported torch already (the torchrun wrapper), with
    this process's environment: on the CPU in this process; on a GPU in a forked child, so that the CUDA
    context the check creates does not stay with this process for the whole run. Returns apply_answer's."""
    if device == "cpu":
        return apply_answer(answer(device, gpu_ids), command)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer in one line of JSON, then leave without running this process's cleanup
        os.close(read)
        try:
            os.write(write, json.dumps(answer(device, gpu_ids)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        raise CliError(f"the configuration check ({device} {gpu_ids}) ended with status {status} without an answer")
    return apply_answer(json.loads(data), command)


def needs_check(environ: Mapping[str, str]) -> bool:
    """Whether a script started with `environ` would build anything the check can refuse or warn about: a
    precision other than 'no', FSDP or bitsandbytes. Torch-free: when nothing is asked, no process imports
    torch to find that out. (An unreadable value also answers True: the check then names it.)"""
    from accel.settings import USE_FSDP
    from accel.settings.handlers import bnb_options_from_env

    try:
        return MIXED_PRECISION.from_env(environ) != "no" or bool(USE_FSDP.from_env(environ)) or (
            bnb_options_from_env(environ) is not None
        )
    except ValueError:
        return True


_ANSWER = "accel-config-check: "
"""The prefix of the child's one line of JSON on stdout (a library may print other lines)."""


def check_values(values: Mapping[str, Any]) -> list[str]:
    """Refuse (CliError) configuration `values` (setting name -> value, as config.yaml holds them)
    that cannot run on this machine; returns the notes (slow precisions) without saying them."""
    environ = to_environment(values)
    use_cpu = bool(values.get(USE_CPU.name, USE_CPU.default))
    return probe(environ, use_cpu, values.get(GPU_IDS.name, GPU_IDS.default), "nothing was written")


def probe(environ: Mapping[str, str], use_cpu: bool, gpu_ids: str, consequence: str) -> list[str]:
    """Build the backend that a script started with `environ` would build; its PrecisionWarnings.

    A backend that refuses becomes one CliError line (the command that runs the check names
    itself when it prints it): what was asked, why it cannot run here, and what to do.
    """
    from accel._warnings import collect_precision_warnings
    from accel.backends.registry import create_backend
    from accel.cli import capabilities
    from accel.kwargs_handlers import Handlers

    try:
        precision = MIXED_PRECISION.from_env(environ)
        handlers = Handlers().with_environment(fp8_recipe_from_env(environ))
    except ValueError as error:
        raise CliError(one_line(error)) from None
    device = capabilities.training_device(use_cpu, gpu_ids)
    with collect_precision_warnings() as notes:
        try:
            backend = create_backend(precision, device, handlers)
        except capabilities.BACKEND_REFUSALS as error:
            raise CliError(
                f"mixed_precision {precision!r} cannot run on {device} with this configuration: {one_line(error)} "
                f"Change the config file (`accel config`) or the flags; {consequence}."
            ) from None
        _check_quantization_and_fsdp(environ, backend, device, consequence)
    return notes


def _check_quantization_and_fsdp(environ: Mapping[str, str], backend: Any, device: Any, consequence: str) -> None:
    """Build the bitsandbytes quantizer (bnb_config) and the FSDP plugin (use_fsdp, fsdp_config) as the
    script's Accelerator would, against the precision: a refusal becomes one CliError line."""
    from accel.accelerator import options
    from accel.cli import capabilities
    from accel.fsdp.environment import environment_plugin
    from accel.kwargs_handlers import Handlers
    from accel.quantization import create_quantizer
    from accel.settings.handlers import bnb_options_from_env

    try:
        quantizer = create_quantizer(Handlers().with_environment(bnb_options_from_env(environ)), backend, device)
        options.fsdp_plugin(environment_plugin(environ), backend, quantizer)
        tp_size = PARALLELISM_SETTINGS_BY_KEY["parallelism_config_tp_size"].from_env(environ) or 1
        if tp_size > 1:  # what TensorParallelStrategy checks when the Accelerator is built
            backend.configure_tensor_parallel()  # a precision that cannot run split layers refuses here
        if quantizer is not None and tp_size > 1:
            from accel.parallel.tensor_strategy import quantization_refusal

            raise ValueError(quantization_refusal(quantizer.mode.name, tp_size))
    except capabilities.BACKEND_REFUSALS as error:
        raise CliError(
            f"this configuration cannot run on {device}: {one_line(error)} Change the config file (`accel config`) "
            f"or the flags; {consequence}."
        ) from None


def one_line(error: BaseException) -> str:
    """`error`'s message on one line (a multi-line message is joined), ending with a full stop."""
    text = " ".join(str(error).split())
    return text if text.endswith((".", "?", "!")) else text + "."


def _main(argv: list[str]) -> int:
    """`python -m accel.cli.config.check cpu|gpu GPU_IDS`: probe this process's environment, answer in JSON."""
    print(_ANSWER + json.dumps(answer(argv[0], argv[1])), flush=True)
    return 0


def answer(device: str, gpu_ids: str) -> dict[str, str | list[str] | None]:
    """Probe this process's environment for `device` (cpu or gpu) and `gpu_ids`: the refusal, else the notes."""
    try:
        return {"refused": None, "notes": probe(os.environ, device == "cpu", gpu_ids, "nothing was started")}
    except CliError as error:
        return {"refused": str(error), "notes": []}


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
