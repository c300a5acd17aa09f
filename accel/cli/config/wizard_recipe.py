"""The FP8 recipe questions of `accel config`: only values the chosen backend runs on this machine.

Each value is tried before it is offered: the FP8 backend is built with the answers so far plus
that value, through the backend's own construction-time checks (capabilities.recipe_problem),
as the Accelerator of a launched script would build it. A menu shows a refused value with the
reason and does not let it be chosen; a typed value it refuses is asked again; a field the
backend does not honour at all is not asked, keeps its default, and is named once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accel.backends.names import CANONICAL_PRECISIONS
from accel.cli import capabilities
from accel.cli.config.prompts import Option, ask_select, ask_setting, ask_yes_no, short_reason
from accel.cli.help_text import describe
from accel.kwargs_handlers.fp8 import FP8RecipeKwargs
from accel.settings import (
    FP8_SETTINGS,
    FP8_SETTINGS_BY_KEY,
    BoolKind,
    IntKind,
    PatternsKind,
    Setting,
)

Answers = dict[str, Any]

FIRST = ("scaling", "base_precision")
"""Recipe fields asked first: they decide which values the others may take."""
BACKEND = FP8_SETTINGS_BY_KEY["backend"]
BASE = FP8_SETTINGS_BY_KEY["base_precision"]
FAST_BASE = "fp32"
"""The base precision proposed where the recipe's default (bf16) is slow: fp32 runs at full speed everywhere."""
SLOW_MARK = " [slow on this CPU]"


def ask_recipe(current: Mapping[str, Any], device: Any) -> Answers:
    """The backend (those that cannot run on `device` shown with why), then, if the user wants to
    change them, the recipe fields that backend honours, each offering only what it runs."""
    status = capabilities.fp8_backend_status(device)
    options = [Option(name, _backend_title(name), short_reason(reason)) for name, reason in status.items()]
    backend = ask_select("Which FP8 backend?", options, current.get(BACKEND.name, BACKEND.default))
    if any(short_reason(reason) != reason for reason in status.values()):
        print("  (`accel env` says in full why a backend cannot run here, with how to install it)")
    note = capabilities.fp8_backend_note(backend)
    if note:
        print(f"Note: {note}.")
    answers: Answers = {BACKEND.name: backend}
    fields = recipe_fields()
    usable = [s for s in fields if honoured(s, answers, device)]
    if BASE in usable:
        _preselect_base(answers, current, device)
    print(f"FP8 recipe defaults ({backend} backend): "
          + ", ".join(f"{s.yaml_key} {_proposed(s, answers)}" for s in usable))
    unused = [s.yaml_key for s in fields if s not in usable]
    if unused:
        print(f"  not used by the {backend!r} backend, left at their defaults: {', '.join(unused)}")
    if ask_yes_no("Change any of them?", any(s.name in current for s in usable)):
        for setting in usable:
            _ask_field(setting, answers, current, device)
    _say_if_slow(answers, device)
    return answers


def fast_base_precision(answers: Mapping[str, Any], device: Any) -> str:
    """The base precision to propose on `device`: the recipe's default (bf16) where it runs fast there, else
    fp32 (when the recipe `answers` run with it). Decided by the capability check the Accelerator's
    slowness warning uses (oneDNN's probe of the CPU's instructions), never by the CPU's name."""
    if not _slow(BASE.default, device) or problem({**answers, BASE.name: FAST_BASE}, device) is not None:
        return str(BASE.default)
    return FAST_BASE


def _preselect_base(answers: Answers, current: Mapping[str, Any], device: Any) -> None:
    """Put the base precision to preselect in `answers` when it is not the recipe's default: the existing
    config's, else fp32 where bf16 is slow on `device` (said, with why). A default the user keeps is then
    written, since a launched Accelerator would otherwise run the recipe's bf16."""
    if BASE.name in current:
        base = current[BASE.name]
    else:
        base = fast_base_precision(answers, device)
        if base != BASE.default:
            print(f"  base_precision: {base} preselected, not the recipe's default {BASE.default}, which is slow "
                  f"here: {capabilities.speed_note(BASE.default, device)}.")
    if base != BASE.default:
        answers[BASE.name] = base


def _proposed(setting: Setting, answers: Mapping[str, Any]) -> str:
    """The value the wizard proposes for a recipe field: one already in `answers` (a preselected base
    precision), else the field's default."""
    if setting.name in answers:
        return setting.format(answers[setting.name])
    return shown_default(setting, answers[BACKEND.name])


def shown_default(setting: Setting, backend: str) -> str:
    """A field's default as the user should read it: the scaling the backend runs when none is given
    (not "-"), "none" for an empty list."""
    if setting.yaml_key == "scaling" and setting.default is None:
        from accel.backends.fp8.choice import default_scaling

        return default_scaling(backend)
    return setting.format(setting.default) or "none"


def _backend_title(name: str) -> str:
    """The backend's menu entry: its name, marked where users should read a note before choosing it."""
    return f"{name} (unmaintained upstream)" if capabilities.fp8_backend_note(name) else name


def recipe_fields() -> list[Setting]:
    """The recipe settings other than the backend, in the order the wizard asks them."""
    first = [FP8_SETTINGS_BY_KEY[key] for key in FIRST]
    return first + [s for s in FP8_SETTINGS if s is not BACKEND and s not in first]


def _ask_field(setting: Setting, answers: Answers, current: Mapping[str, Any], device: Any) -> None:
    """Ask one field (unless earlier answers left the backend nothing to choose); store it if not the default."""
    if not honoured(setting, answers, device):
        answers.pop(setting.name, None)
        print(f"  {setting.yaml_key}: kept at {shown_default(setting, answers[BACKEND.name])} (not used with these answers)")
        return
    slow = setting is BASE
    proposed = answers.get(setting.name, current.get(setting.name, setting.default))  # a preselected base precision
    value = ask_setting(
        setting, f"{setting.yaml_key}: {describe(setting)}", proposed,
        problem=lambda v: problem({**answers, setting.name: v}, device),
        mark=(lambda v: SLOW_MARK if _slow(v, device) else "") if slow else None,
    )
    if value != setting.default:
        answers[setting.name] = value
    else:
        answers.pop(setting.name, None)  # a preselected base precision put back to the recipe's default


def honoured(setting: Setting, answers: Mapping[str, Any], device: Any) -> bool:
    """Whether the backend runs some value of `setting` other than its default, given `answers`."""
    return any(problem({**answers, setting.name: value}, device) is None for value in _other_values(setting))


def _other_values(setting: Setting) -> list[Any]:
    """Values of `setting` other than its default, enough to learn whether a backend honours it."""
    kind, default = setting.kind, setting.default
    if isinstance(kind, BoolKind):
        return [not default]
    if isinstance(kind, IntKind):
        return [1 if default is None else default + 1]
    if isinstance(kind, PatternsKind):
        return [("*",)]
    return [choice for choice in kind.choices if choice != default]


def problem(answers: Mapping[str, Any], device: Any) -> str | None:
    """Why the recipe `answers` (setting name -> value) cannot run on `device`, or None."""
    fields = {s.yaml_key: answers[s.name] for s in FP8_SETTINGS if s.name in answers}
    try:
        recipe = FP8RecipeKwargs(**fields)
    except (TypeError, ValueError) as error:
        return str(error)
    return capabilities.recipe_problem(recipe, device)


def _slow(precision: str, device: Any) -> bool:
    return precision in CANONICAL_PRECISIONS and capabilities.speed_note(precision, device) is not None


def _say_if_slow(answers: Mapping[str, Any], device: Any) -> None:
    """Say once, after the recipe, when its base precision is slow here (the menu marked it)."""
    base = answers.get(BASE.name, BASE.default)
    note = capabilities.speed_note(base, device) if base in CANONICAL_PRECISIONS else None
    if note:
        print(f"  note: base_precision {base} will be slow: {note}.")
