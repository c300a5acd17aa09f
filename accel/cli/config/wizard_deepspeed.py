"""The DeepSpeed questions of `accel config`: asked for several processes without FSDP, where DeepSpeed is
installed and runs the chosen precision; what DeepSpeed cannot run with (a device mesh, bitsandbytes,
torch.compile) is then not asked (wizard.ask_all)."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from accel.cli.config.prompts import Option, ask_select, ask_yes_no
from accel.settings import DEEPSPEED_SETTINGS_BY_KEY, MIXED_PRECISION, USE_DEEPSPEED, USE_FSDP

Answers = dict[str, Any]

STAGE = DEEPSPEED_SETTINGS_BY_KEY["zero_stage"]
OFFLOAD = DEEPSPEED_SETTINGS_BY_KEY["offload_optimizer_device"]
STAGES = {
    0: "0  data parallel (like DDP), through DeepSpeed's engine",
    1: "1  optimizer state sharded",
    2: "2  optimizer state and gradients sharded",
    3: "3  optimizer state, gradients and weights sharded",
}
DEFAULT_STAGE = 2
"""DeepSpeed's (and Accelerate's) default stage."""


def ask_deepspeed(current: Mapping[str, Any], answers: Mapping[str, Any], device: Any) -> Answers:
    """use_deepspeed and its ZeRO stage and optimizer offload ({} for DDP), where DeepSpeed can run."""
    if answers.get(USE_FSDP.name) or importlib.util.find_spec("deepspeed") is None:
        return {}
    reason = precision_problem(answers.get(MIXED_PRECISION.name, MIXED_PRECISION.default), device)
    if reason is not None:
        print(f"  DeepSpeed: not asked, {reason}")
        return {}
    if not ask_yes_no("Train through DeepSpeed's ZeRO engine instead of DDP (use_deepspeed)?",
                      bool(current.get(USE_DEEPSPEED.name, False))):
        return {}
    stage = ask_select("Which ZeRO stage (zero_stage)?", [Option(n, title) for n, title in STAGES.items()],
                       current.get(STAGE.name) if current.get(STAGE.name) is not None else DEFAULT_STAGE)
    offload = ask_select(
        "Where should ZeRO keep the optimizer state (offload_optimizer_device)?",
        [Option("none", "none  with the training device"), Option("cpu", "cpu   in CPU memory (less device memory)")],
        current.get(OFFLOAD.name) if current.get(OFFLOAD.name) in ("none", "cpu") else "none",
    )
    return {USE_DEEPSPEED.name: True, STAGE.name: stage, OFFLOAD.name: offload}


def precision_problem(precision: str, device: Any) -> str | None:
    """Why DeepSpeed cannot run `precision` on `device` (its own construction-time check), or None."""
    from accel.backends.deepspeed import deepspeed_precision
    from accel.kwargs_handlers import Handlers

    try:
        deepspeed_precision(precision, device, Handlers())
    except ValueError as error:
        return str(error).split(": ", 1)[-1].split(". ")[0]
    return None
