"""Walk every path through `accel config`'s questions on this machine, answering as a user could.

The wizard's prompts are replaced by a walker that, at each menu, takes one of the options the
wizard lets the user choose (refused ones are never taken, as in the terminal), and at each
branching yes/no or number question one of its answers; everything else keeps the wizard's
default. Run again and again, it enumerates the leaves of the question tree like an odometer:
each leaf is the answers one user could have given, ready to write as config.yaml.

What branches: the number of processes (1 or 2), every menu (precision, FP8 backend, FSDP wrap
policy and state dict, ZeRO stage and offload, the device mesh, bitsandbytes mode and dtype), and whether to
use FSDP or DeepSpeed.
What keeps the default: the FP8 recipe fields (asked only after "Change any of them?", whose
values tests/cli/test_cli_wizard_recipe.py checks one by one), torch.compile (its backends are
checked by test_cli_dynamo.py; compiling in every combination would take an hour here), and
text answers such as accumulation steps.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Iterator
from typing import Any

import pytest

from accel.cli import capabilities
from accel.cli.config import (
    prompts,
    wizard,
    wizard_bnb,
    wizard_deepspeed,
    wizard_dynamo,
    wizard_fsdp,
    wizard_parallel,
    wizard_recipe,
)

MODULES = (prompts, wizard, wizard_bnb, wizard_deepspeed, wizard_dynamo, wizard_fsdp, wizard_parallel, wizard_recipe)
BRANCHING_YES_NO = ("FSDP", "DeepSpeed", "device mesh", "fsdp_activation_checkpointing", "fsdp_cpu_ram_efficient_loading")
"""Yes/no questions whose both answers are walked (others keep their default: fsdp_reshard_after_forward and
fsdp_offload_params change no question that follows and no check, and offloading is asked on GPUs only)."""
CACHED = ("fp8_backend_status", "precision_status", "recipe_problem", "speed_note", "training_device")
"""The machine probes the questions call: the same answers for the whole walk, so asked once each."""
PROCESSES = (1, 2)


class Walker:
    """Answers the wizard's questions from `path` (choice indexes), recording how many choices each had."""

    def __init__(self, path: list[int]) -> None:
        self.path = path
        self.widths: list[int] = []
        self.taken: list[str] = []

    def _pick(self, question: str, choices: list[Any]) -> Any:
        position = len(self.widths)
        if position == len(self.path):
            self.path.append(0)
        self.widths.append(len(choices))
        choice = choices[self.path[position]]
        self.taken.append(f"{question} -> {choice}")
        return choice

    def select(self, question: str, options: list[Any], default: Any) -> Any:
        return self._pick(question, [o.value for o in options if o.unavailable is None])

    def yes_no(self, question: str, default: bool) -> bool:
        if any(word in question for word in BRANCHING_YES_NO):
            return bool(self._pick(question, [False, True]))
        return default

    def text(self, setting: Any, question: str, default: Any, check: Any = None) -> Any:
        if "training processes" in question:
            return self._pick(question, list(PROCESSES))
        if "Tensor-parallel size" in question:  # "...; one of 1, 2; 1: none)?"
            return self._pick(question, [int(n) for n in question.split("one of ")[1].split(";")[0].split(", ")])
        return default

    def next_path(self) -> list[int] | None:
        """The path of the next leaf (the odometer turned at the last question with choices left), or None."""
        for position in reversed(range(len(self.widths))):
            if self.path[position] + 1 < self.widths[position]:
                return [*self.path[:position], self.path[position] + 1]
        return None


@contextlib.contextmanager
def answered_by(walker: Walker) -> Iterator[None]:
    """The wizard's prompts replaced by `walker` in every module that imported them."""
    with pytest.MonkeyPatch.context() as patch:
        for name in CACHED:
            patch.setattr(capabilities, name, _cached(getattr(capabilities, name)))
        for module in MODULES:
            for name, method in (("ask_select", walker.select), ("ask_yes_no", walker.yes_no), ("ask_text", walker.text)):
                if hasattr(module, name):
                    patch.setattr(module, name, method)
        yield


_CACHES: dict[str, Any] = {}


def _cached(probe: Any) -> Any:
    """`probe` with its answers kept for the process, keyed by the repr of its arguments (devices, plain
    values, FP8 recipes), each caller given its own copy of what it may change."""
    answers: dict[str, Any] = _CACHES.setdefault(probe.__qualname__, {})

    @functools.wraps(probe)
    def cached(*args: Any) -> Any:
        key = repr(args)
        if key not in answers:
            answers[key] = probe(*args)
        return copy.copy(answers[key])

    return cached


def every_answer_set(machine: wizard.Machine) -> Iterator[tuple[dict[str, Any], list[str]]]:
    """Each leaf's answers, with the questions and choices taken to reach it ("question -> choice")."""
    path: list[int] | None = []
    while path is not None:
        walker = Walker(path)
        with answered_by(walker), contextlib.redirect_stdout(None):
            answers = wizard.ask_all(machine, {})
        yield answers, walker.taken
        path = walker.next_path()
