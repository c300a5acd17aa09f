"""The wizard's bitsandbytes question: quantize the Linear weights or not, in which mode, and how.

Only modes that run on the training device can be chosen: each is tried there (a real forward and
backward through accel.quantization.capability), and one that cannot run is shown with the reason.
Not asked with fp8 (both replace the Linear layers); with FSDP only the 4-bit modes (which it shards) can be chosen.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accel.cli.config.prompts import Option, ask_select, ask_text, short_reason
from accel.kwargs_handlers.bitsandbytes import INT8_MODES
from accel.settings import (
    BNB_SETTINGS_BY_KEY,
    FSDP_SETTINGS_BY_KEY,
    MIXED_PRECISION,
    PARALLELISM_SETTINGS_BY_KEY,
    RECIPE_PRECISION,
    USE_FSDP,
)

Answers = dict[str, Any]

MODE, DTYPE, IGNORE = (BNB_SETTINGS_BY_KEY[key] for key in ("mode", "dtype", "ignore_modules"))
_NO = "no"
_DEFAULT_DTYPE = "default"
INT8_DTYPE_REASON = "the int8 modes compute in float16 only (LLM.int8())"
FSDP_REASON = "FSDP shards the 4-bit modes only"
RAM_LOADING_REASON = "not with fsdp_cpu_ram_efficient_loading (each process quantizes its own copy)"
RAM_LOADING = FSDP_SETTINGS_BY_KEY["fsdp_cpu_ram_efficient_loading"]
TP_SIZE = PARALLELISM_SETTINGS_BY_KEY["parallelism_config_tp_size"]


def ask_quantization(current: Mapping[str, Any], device: Any, answers: Mapping[str, Any]) -> Answers:
    """The bnb_config answers ({} for no quantization), given the precision and FSDP answers so far."""
    if answers.get(MIXED_PRECISION.name) == RECIPE_PRECISION:
        print("  bitsandbytes quantization: not asked, fp8 replaces the same Linear layers")
        return {}
    if (answers.get(TP_SIZE.name) or 1) > 1:
        print("  bitsandbytes quantization: not asked, tensor parallelism splits the Linear layers it would replace")
        return {}
    modes = _mode_options(device, bool(answers.get(USE_FSDP.name)), bool(answers.get(RAM_LOADING.name)))
    reasons = {option.unavailable for option in modes}
    if len(reasons) == 1 and None not in reasons:  # one reason for every mode: say it once, not six times
        print(f"  bitsandbytes quantization: not asked, no mode can run here ({reasons.pop()})")
        return {}
    mode = ask_select(
        "Quantize the Linear weights with bitsandbytes (stored in 4 or 8 bits; QLoRA)?",
        [Option(_NO, f"{_NO:<14} keep them as they are"), *modes],
        current.get(MODE.name, MODE.default) if _configured(current) else _NO,
    )
    if mode == _NO:
        return {}
    result: Answers = {MODE.name: mode}
    dtype = _ask_dtype(mode, current, {**answers, MODE.name: mode})
    if dtype is not None:
        result[DTYPE.name] = dtype
    ignored = ask_text(IGNORE, "Modules to keep unquantized (fnmatch patterns such as lm_head, comma-separated; "
                       "empty for none)?", current.get(IGNORE.name, ()))
    if ignored:
        result[IGNORE.name] = ignored
    return result


def _configured(current: Mapping[str, Any]) -> bool:
    return any(setting.name in current for setting in BNB_SETTINGS_BY_KEY.values())


def _mode_options(device: Any, fsdp: bool, ram_loading: bool) -> list[Option]:
    """Every mode, with what it stores, and why it cannot run on `device` (or under FSDP, or with FSDP's
    cpu_ram_efficient_loading) where it cannot."""
    from accel.quantization.capability import supported_modes
    from accel.quantization.modes import MODES

    def reason(mode: str, device_reason: str | None) -> str | None:
        if fsdp and not MODES[mode].is_4bit:
            return FSDP_REASON
        if fsdp and ram_loading:
            return RAM_LOADING_REASON
        return short_reason(device_reason)

    return [
        Option(mode, f"{mode:<14} {MODES[mode].describe()}", reason(mode, device_reason))
        for mode, device_reason in supported_modes(device).items()
    ]


def _ask_dtype(mode: str, current: Mapping[str, Any], answers: Mapping[str, Any]) -> str | None:
    """The compute dtype (None: the precision's, or float16 for int8); the int8 modes offer float16 only, and
    a dtype the configuration cannot run (the precision's float64, for one) is shown with the reason."""
    int8 = mode in INT8_MODES
    options = [Option(_DEFAULT_DTYPE, "default: float16" if int8 else "default: the precision's compute dtype",
                      _dtype_problem(answers, None))]
    for name in DTYPE.kind.choices:
        options.append(Option(name, name, INT8_DTYPE_REASON if int8 and name != "float16" else _dtype_problem(answers, name)))
    previous = current.get(DTYPE.name) or _DEFAULT_DTYPE
    answer = ask_select("Which dtype should the quantized layers compute in?", options, previous)
    return None if answer == _DEFAULT_DTYPE else answer


def _dtype_problem(answers: Mapping[str, Any], dtype: str | None) -> str | None:
    """Why the configuration `answers` with compute dtype `dtype` cannot run here (the check `accel launch`
    runs, shortened for a menu line), or None."""
    from accel.cli.config.check import check_values
    from accel.cli.errors import CliError

    try:
        check_values({**answers, **({DTYPE.name: dtype} if dtype else {})})
    except CliError as error:
        return short_reason(str(error).split(": ", 1)[-1])
    return None
