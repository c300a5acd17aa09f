"""The wizard's torch.compile questions (Accelerate's order): compile or not, the backend, then the
defaults only when asked to change them. Backends and modes that cannot run on the training
device are shown with the reason and cannot be chosen."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accel.cli.config.prompts import Option, ask_select, ask_yes_no, short_reason
from accel.kwargs_handlers.dynamo import BACKENDS_WITH_MODES, DYNAMO_BACKENDS, DYNAMO_MODES
from accel.settings import DYNAMO_BACKEND, DYNAMO_MODE, DYNAMO_USE_DYNAMIC, DYNAMO_USE_FULLGRAPH, Setting

Answers = dict[str, Any]


def _current(current: Mapping[str, Any], setting: Setting) -> Any:
    return current.get(setting.name, setting.default)


def ask_dynamo(current: Mapping[str, Any], device: Any) -> Answers:
    """Whether prepare compiles models, and with which torch.compile backend and options."""
    compiled = _current(current, DYNAMO_BACKEND) != "no"
    if not ask_yes_no("Compile the model with torch.compile (dynamo)?", compiled):
        return {}  # the default: no dynamo_config section
    options = [Option(name, name, short_reason(_problem(name, "default", device))) for name in DYNAMO_BACKENDS[1:]]
    default = _current(current, DYNAMO_BACKEND) if compiled else "inductor"
    backend = ask_select("Which torch.compile backend?", options, default)
    answers: Answers = {DYNAMO_BACKEND.name: backend}
    customized = any(s.name in current for s in (DYNAMO_MODE, DYNAMO_USE_FULLGRAPH, DYNAMO_USE_DYNAMIC))
    if not ask_yes_no("Change the defaults sent to torch.compile (mode, fullgraph, dynamic)?", customized):
        return answers
    if backend in BACKENDS_WITH_MODES:
        modes = [Option(mode, mode, short_reason(_problem(backend, mode, device))) for mode in DYNAMO_MODES]
        answers[DYNAMO_MODE.name] = ask_select("Which torch.compile mode?", modes, _current(current, DYNAMO_MODE))
    answers[DYNAMO_USE_FULLGRAPH.name] = ask_yes_no(
        "Compile each model as one graph (fullgraph: fail at a graph break)?", _current(current, DYNAMO_USE_FULLGRAPH)
    )
    answers[DYNAMO_USE_DYNAMIC.name] = ask_yes_no(
        "Compile for dynamic shapes (dynamic)?", bool(_current(current, DYNAMO_USE_DYNAMIC))
    )
    return answers


def _problem(backend: str, mode: str, device: Any) -> str | None:
    """Why `backend` with `mode` cannot compile on `device` (None when it can)."""
    from accel.training.compiling import check_runs_here

    try:
        check_runs_here(backend, mode, device)
    except ValueError as error:
        return str(error)
    return None
