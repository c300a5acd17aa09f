"""The ACCEL_* environment variables: every name accel knows, and a check of those that are set.

The known names are derived, never listed by hand: one per `Setting` that accel.settings
defines (alone or in a tuple such as FP8_SETTINGS, so every ACCEL_FP8_* is included), plus the
few variables that are not settings (OTHER_VARIABLES). A setting added to the schema is known
here at once. Torch-free, so that the command line can use it too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from accel import settings
from accel._validation import closest
from accel._warnings import SAID_VARIABLE, warn_once

CONFIG_FILE_VARIABLE = settings.ENV_PREFIX + "CONFIG_FILE"
"""Where `accel` commands look for config.yaml (not a setting: it chooses where settings come from)."""
OTHER_VARIABLES: tuple[str, ...] = (CONFIG_FILE_VARIABLE, settings.ENV_PREFIX + "LOG_LEVEL", SAID_VARIABLE)
"""ACCEL_* variables that are not settings. A new one must be added here, or the Accelerator warns about it."""


def known_settings() -> dict[str, settings.Setting]:
    """Environment variable -> Setting, for every Setting in accel.settings."""
    found: dict[str, settings.Setting] = {}
    for value in vars(settings).values():
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, settings.Setting):
                found[item.env_var] = item
    return found


def known_variables() -> frozenset[str]:
    """Every ACCEL_* variable accel reads or sets."""
    return frozenset(known_settings()) | frozenset(OTHER_VARIABLES)


def unknown_variables(environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """Each ACCEL_* variable set in `environ` that accel does not know -> the closest known name (or None)."""
    environ = os.environ if environ is None else environ
    known = known_variables()
    prefix = settings.ENV_PREFIX
    stems = sorted(name.removeprefix(prefix) for name in known)  # compared without the prefix all share
    unknown = sorted(name for name in environ if name.startswith(prefix) and name not in known)
    return {name: _prefixed(closest(name.removeprefix(prefix), stems)) for name in unknown}


def _prefixed(stem: str | None) -> str | None:
    return None if stem is None else settings.ENV_PREFIX + stem


def check_setting_values(environ: Mapping[str, str] | None = None) -> None:
    """Parse every setting's variable that is set; ValueError naming the first one that does not parse, or an
    ACCEL_* and an ACCELERATE_* variable (`accelerate launch`'s) of one setting that disagree.

    (The Accelerator reads only some of them; a bad value of the others must not pass unnoticed.) FSDP's
    own FSDP_* variables are read only with use_fsdp on, as Accelerate reads them only for FSDP.
    """
    environ = os.environ if environ is None else environ
    for name, setting in known_settings().items():
        if name in environ:
            setting.parse(environ[name], name)
    fsdp = settings.USE_FSDP.from_env(environ)
    for setting in known_settings().values():
        if fsdp or setting.section != settings.FSDP_SECTION:
            setting.lookup(environ)
    check_accelerate_launch(environ)


_ACCELERATE_FEATURES = {
    "ACCELERATE_USE_MEGATRON_LM": "Megatron-LM, which accel does not run",
    "ACCELERATE_USE_SAGEMAKER": "SageMaker's launcher, which accel does not support",
}
"""Accelerate launcher variables that, when true, ask for what accel cannot do: refused, never ignored."""
_MPI_SIZES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE")


def _truthy(text: str) -> bool:
    return text.strip().lower() in ("1", "true", "yes", "y", "t", "on")  # Accelerate's str_to_bool


def check_accelerate_launch(environ: Mapping[str, str]) -> None:
    """Refuse what `accelerate launch` asked for that accel cannot honour, naming the variable:
    Megatron-LM, Accelerate's FP8 variables (accel reads its
    own ACCEL_FP8_*), and MPI-started processes (accel joins the processes torchrun describes)."""
    for variable, feature in _ACCELERATE_FEATURES.items():
        if _truthy(environ.get(variable, "")):
            raise ValueError(f"{variable}={environ[variable]!r} asks for {feature}. Unset it (or drop the flag "
                             "from `accelerate launch`).")
    fp8 = sorted(name for name in environ if name.startswith(settings.ACCELERATE_PREFIX + "FP8_"))
    if fp8:
        raise ValueError(
            f"{', '.join(fp8)} set: accel does not read Accelerate's FP8 variables (its recipes differ). Give the "
            "recipe as FP8RecipeKwargs in the script, or with `accel launch --fp8_*` (ACCEL_FP8_*; docs/fp8.md)."
        )
    sizes = [name for name in _MPI_SIZES if environ.get(name, "1").strip() not in ("", "0", "1")]
    if sizes and "WORLD_SIZE" not in environ:
        raise ValueError(
            f"{sizes[0]}={environ[sizes[0]]!r}: this process was started by MPI (accelerate launch --mpirun_hostfile), "
            "whose processes accel cannot join: it reads torchrun's RANK/WORLD_SIZE. Start the script with "
            "`accel launch --num_processes N` or `accelerate launch --multi_gpu --num_processes N` (torchrun)."
        )


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """What an Accelerator checks when it is built: every ACCEL_* setting value parses (else ValueError),
    an unknown ACCEL_* variable gets one warning with the closest known name, and ACCEL_NUM_PROCESSES
    contradicting the processes really running gets one warning."""
    environ = os.environ if environ is None else environ
    check_setting_values(environ)
    for name, guess in unknown_variables(environ).items():
        hint = f" Did you mean {guess}?" if guess else ""
        warn_once(
            f"{name} is set in the environment but accel reads no such variable, so it has no effect.{hint} "
            "The ACCEL_* variables accel reads are listed in docs/cli.md.",
            UserWarning,
        )
    _warn_if_not_launched(environ)


def _warn_if_not_launched(environ: Mapping[str, str]) -> None:
    variable = settings.NUM_PROCESSES.env_var
    if variable not in environ:
        return
    asked = settings.NUM_PROCESSES.parse(environ[variable], variable)
    running = environ.get("WORLD_SIZE", "1")
    if str(asked) != running.strip():
        warn_once(
            f"{variable}={environ[variable]!r} is set, but this script runs as {running} process(es) "
            f"(WORLD_SIZE={running}): the Accelerator starts no processes. To run {asked}, start the script with "
            f"`accel launch --num_processes {asked} script.py`.",
            UserWarning,
        )
