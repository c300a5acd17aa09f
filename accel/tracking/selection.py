"""`log_with=` checked at construction, and the trackers `init_trackers` builds from it."""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping, Sequence
from typing import Any

from accel._validation import choice_error
from accel.tracking.base import GeneralTracker
from accel.tracking.logger_type import LoggerType
from accel.tracking.registry import LOGGER_TYPE_TO_CLASS, NOT_PROVIDED, get_available_trackers, missing_install

LogWith = str | LoggerType | GeneralTracker
Selected = str | GeneralTracker
"""A tracker chosen by `log_with`: its registered name, or a tracker instance the script built."""


def filter_trackers(
    log_with: LogWith | Sequence[LogWith] | None, logging_dir: str | os.PathLike[str] | None = None
) -> list[Selected]:
    """The trackers `log_with` selects, each once, in order; raises for any that cannot run here.

    Accepts a name, a `LoggerType`, a `GeneralTracker` instance, or a list of them; `"all"` adds
    every built-in tracker whose library is installed. Unlike Accelerate, which skips a tracker
    whose library is missing, this raises ImportError naming the pip command.
    """
    if log_with is None:
        return []
    items = list(log_with) if isinstance(log_with, (list, tuple)) else [log_with]
    selected: list[Selected] = []
    for item in items:
        for choice in _expand(item):
            if not any(choice is s or (isinstance(s, str) and s == choice) for s in selected):
                selected.append(choice)
    for choice in selected:
        if isinstance(choice, str):
            _check_can_run(choice, logging_dir)
    return selected


def _expand(item: Any) -> list[Selected]:
    if isinstance(item, GeneralTracker):
        return [item]
    if isinstance(item, type) and issubclass(item, GeneralTracker):
        raise TypeError(
            f"log_with={item.__name__} is a tracker class: pass an instance ({item.__name__}(...)), or "
            f"register it with accel.tracking.register_tracker_class({item.__name__}) and pass its name."
        )
    if not isinstance(item, str):
        raise TypeError(
            f"log_with={item!r} ({type(item).__name__}) is not accepted: give a tracker name, a LoggerType, "
            "a GeneralTracker instance, or a list of them."
        )
    name = canonical_name(item)
    if name == "all":
        return [str(t) for t in get_available_trackers()]
    return [name]


def canonical_name(value: str) -> str:
    """The registered spelling of a tracker name (any case), or raise naming the accepted names."""
    value = str(value)  # a LoggerType becomes its value
    names = ["all", *LOGGER_TYPE_TO_CLASS]
    by_lower = {n.lower(): n for n in names}
    if value in LOGGER_TYPE_TO_CLASS or value.lower() in by_lower:
        return value if value in LOGGER_TYPE_TO_CLASS else by_lower[value.lower()]
    if value.lower() in NOT_PROVIDED:
        raise ValueError(
            f"log_with={value!r}: accel does not ship a {value} tracker (Accelerate does). Write a small "
            "accel.tracking.GeneralTracker subclass for it and pass an instance, or register it with "
            f"register_tracker_class; see docs/tracking.md. Built in: {', '.join(map(repr, names))}."
        )
    raise choice_error("log_with", value, names, hint="Or pass a GeneralTracker instance for a custom tracker.")


def _check_can_run(name: str, logging_dir: str | os.PathLike[str] | None) -> None:
    tracker_class = LOGGER_TYPE_TO_CLASS[name]
    command = missing_install(tracker_class)
    if command is not None:
        raise ImportError(f"log_with={name!r} needs a library that is not installed here: {command}")
    if tracker_class.requires_logging_directory and logging_dir is None:
        raise ValueError(
            f"Logging with `{name}` requires a `logging_dir` (Accelerate's words): log_with={name!r} writes its logs "
            "under a folder, and none is set. Pass Accelerator(project_dir=...) or "
            "project_config=ProjectConfiguration(project_dir=..., logging_dir=...)."
        )


def check_tracker_kwargs(
    argument: str, kwargs: Mapping[str, Any] | None, selected: Sequence[Selected] = ()
) -> dict[str, dict[str, Any]]:
    """`init_kwargs` / `log_kwargs`: a dict from tracker name to a dict of options.

    A key that names no tracker at all (a typo) raises; a known tracker that is not in use is fine,
    so one script can run with any `log_with`. The names of tracker instances in `selected` count too.
    """
    if kwargs is None:
        return {}
    if not isinstance(kwargs, Mapping):
        raise TypeError(f"{argument}={kwargs!r}: give a dict from tracker name to a dict of options.")
    names = [*LOGGER_TYPE_TO_CLASS, *(getattr(s, "name", "") for s in selected if isinstance(s, GeneralTracker))]
    for key, options in kwargs.items():
        if key not in names and str(key).lower() not in NOT_PROVIDED:
            raise choice_error(f"{argument} key", key, list(dict.fromkeys(names)))
        if not isinstance(options, Mapping):
            raise TypeError(f"{argument}[{key!r}]={options!r}: give a dict of keyword arguments.")
    return {str(k): dict(v) for k, v in kwargs.items()}


def create_trackers(
    selected: Sequence[Selected],
    project_name: str,
    logging_dir: str | os.PathLike[str] | None,
    init_kwargs: Mapping[str, dict[str, Any]],
) -> list[GeneralTracker]:
    """Build the selected trackers (instances are used as given), as Accelerate's `init_trackers` does.

    A tracker needing the folder gets it as second positional argument; one that only accepts a
    `logging_dir` keyword (mlflow, wandb) gets it unless `init_kwargs` sets it.
    """
    trackers = []
    for choice in selected:
        if isinstance(choice, GeneralTracker):
            trackers.append(choice)
            continue
        tracker_class = LOGGER_TYPE_TO_CLASS[choice]
        options = dict(init_kwargs.get(choice, {}))
        if tracker_class.requires_logging_directory:
            tracker = tracker_class(project_name, logging_dir, **options)  # type: ignore[call-arg,arg-type]  # subclass __init__
            trackers.append(tracker)
            continue
        if logging_dir is not None and "logging_dir" not in options and _takes_logging_dir(tracker_class):
            options["logging_dir"] = logging_dir
        trackers.append(tracker_class(project_name, **options))  # type: ignore[arg-type]  # subclass __init__
    return trackers


def _takes_logging_dir(tracker_class: type[GeneralTracker]) -> bool:
    return "logging_dir" in inspect.signature(tracker_class.__init__).parameters
