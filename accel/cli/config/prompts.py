"""questionary prompts for one setting each, built from the setting's kind.

An answer is checked at the prompt with the same parser `accel launch` uses for the setting's
flag, so an invalid answer shows the reason and is asked again. Ctrl-C and Ctrl-D raise
(KeyboardInterrupt, EOFError) for the caller to handle; nothing here writes files.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any

from accel.settings import BoolKind, ChoiceKind, PatternsKind, Setting

_NONE = ""
"""The menu value that stands for None (questionary replaces a None value with the title)."""

Check = Callable[[Any], "str | None"]
"""An extra check of a parsed answer: the problem in words, or None when it is fine."""


@dataclasses.dataclass(frozen=True)
class Option:
    """One entry of a menu: the value it stands for, its text, and why it cannot be chosen (if so)."""

    value: Any
    title: str
    unavailable: str | None = None


def ask_text(setting: Setting, question: str, default: Any, check: Check | None = None) -> Any:
    """Ask for `setting` as text; re-asks until it parses and passes `check`."""
    import questionary

    def validate(text: str) -> bool | str:
        if default is None and not text.strip():  # nothing typed: the setting keeps its default, None
            return True
        try:
            value = setting.parse(text, setting.yaml_path)
        except ValueError as error:
            return str(error)
        problem = check(value) if check is not None else None
        return problem or True

    shown = "" if default is None else setting.format(default)
    answer = questionary.text(question, default=shown, validate=validate).unsafe_ask()
    return None if default is None and not answer.strip() else setting.parse(answer, setting.yaml_path)


def ask_yes_no(question: str, default: bool) -> bool:
    """A yes/no question (y, n or Enter for the default)."""
    import questionary

    return bool(questionary.confirm(question, default=default).unsafe_ask())


def ask_select(question: str, options: Sequence[Option], default: Any) -> Any:
    """A menu; unavailable options are shown with their reason and cannot be chosen."""
    import questionary

    choices = [questionary.Choice(o.title, value=o.value, disabled=o.unavailable) for o in options]
    enabled = [o.value for o in options if o.unavailable is None]
    if not enabled:
        raise ValueError(f"{question}: no option can be chosen here")
    start = default if default in enabled else enabled[0]
    return questionary.select(question, choices=choices, default=_choice_for(choices, start)).unsafe_ask()


def _choice_for(choices: list[Any], value: Any) -> Any:
    return next(choice for choice in choices if choice.value == value)


def ask_setting(
    setting: Setting, question: str, default: Any, problem: Check | None = None, mark: Callable[[Any], str] | None = None
) -> Any:
    """Ask for `setting` with the prompt its kind calls for: yes/no, a menu of its choices, or text.

    `problem` says why a value cannot be used (None when it can): a menu shows such a choice with
    the reason and does not let it be chosen; a text answer is asked again. `mark` adds a note to
    a choice's menu line (" [slow on this CPU]").
    """
    if isinstance(setting.kind, BoolKind):
        return ask_yes_no(question, bool(default))
    if setting.kind.choices:
        options = [
            Option(choice, choice + (mark(choice) if mark else ""), short_reason(problem(choice)) if problem else None)
            for choice in setting.kind.choices
        ]
        if isinstance(setting.kind, ChoiceKind) and setting.kind.optional:
            options.insert(0, Option(_NONE, "default (the backend's own)"))
        answer = ask_select(question, options, _NONE if default is None else default)
        return None if answer == _NONE else answer
    if isinstance(setting.kind, PatternsKind):
        question += " (comma-separated, empty for none)"
    return ask_text(setting, question, default, check=problem)


MENU_REASON_WIDTH = 100
"""The most characters of a reason a menu line shows (`accel env` gives the whole reason)."""


def short_reason(reason: str | None) -> str | None:
    """A reason cut to fit a menu line: its first sentence, without a leading "FP8RecipeKwargs(...)",
    without parenthesised details (install commands, paths), at most MENU_REASON_WIDTH characters."""
    if reason is None:
        return None
    text = re.sub(r"^FP8RecipeKwargs\([^)]*\) ", "", reason)
    while (brief := re.sub(r" ?\([^()]*\)", "", text)) != text:  # innermost parentheses first
        text = brief
    first = text.split(". ")[0].rstrip(".")
    return first if len(first) <= MENU_REASON_WIDTH else first[: MENU_REASON_WIDTH - 3].rstrip() + "..."
