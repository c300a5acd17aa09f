"""The wizard's device-mesh questions (parallelism_config), asked after FSDP's when several processes train.

First whether to lay the processes out as a mesh at all (no: DDP or FSDP2 over all of them); then the
tensor-parallel size (without FSDP only 1 or all processes: torch cannot replicate split weights with
DDP), and, under FSDP, how many replicas of the sharded model (HSDP) where the processes left after
tp split into replicas of more than one process each. The answers are the parallelism_config_*
settings, which `accel launch` passes on as ACCEL_PARALLELISM_CONFIG_*.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accel.cli.config.prompts import ask_text, ask_yes_no
from accel.settings import PARALLELISM_SIZE_SETTINGS, USE_FSDP

Answers = dict[str, Any]
_KEY = {setting.keyword: setting for setting in PARALLELISM_SIZE_SETTINGS}
"""The sizes by keyword (sp_backend, a name, is not one: a config that names it has not asked for a mesh)."""


def ask_parallelism(current: Mapping[str, Any], processes: int, answers: Mapping[str, Any]) -> Answers:
    """The mesh sizes for `processes` processes ({} where there is nothing to choose, or the user declines)."""
    fsdp = bool(answers.get(USE_FSDP.name))
    # without FSDP the processes outside tensor parallelism would replicate it with DDP, which torch cannot run
    # over split weights: there, tp_size is all processes or none; with FSDP, FSDP2 needs more than one process
    # left to shard over
    allowed = [n for n in range(1, processes + 1)
               if processes % n == 0 and (n in (1, processes) if not fsdp else processes // n > 1)
               and (n == 1 or _tensor_parallel_problem(answers, n) is None)]
    if allowed == [1] and not (fsdp and _replica_counts(processes)):
        return {}  # no tensor parallelism and no replicas to choose: nothing to lay out
    given = any(current.get(setting.name) not in (None, 1) for setting in _KEY.values())
    if not ask_yes_no(f"Lay the {processes} processes out as a device mesh (tensor parallelism, or HSDP: replicas "
                      "of the sharded model)?", given):
        return {}
    setting = _KEY["tp_size"]
    tp = ask_text(setting, f"Tensor-parallel size (processes that split each layer; one of {', '.join(map(str, allowed))};"
                  " 1: none)?", current.get(setting.name) if current.get(setting.name) in allowed else 1,
                  check=lambda n: None if n in allowed else f"give one of {', '.join(map(str, allowed))}")
    rest = processes // tp
    replicate = rest if not fsdp else _ask_replicas(current, rest)
    return {_KEY["dp_replicate_size"].name: replicate, _KEY["dp_shard_size"].name: rest // replicate,
            _KEY["tp_size"].name: tp, _KEY["cp_size"].name: 1}


def _replica_counts(processes: int) -> list[int]:
    """Replica counts r (> 1) that leave shard groups of more than one process."""
    return [r for r in range(2, processes) if processes % r == 0]


def _ask_replicas(current: Mapping[str, Any], rest: int) -> int:
    """How many replicas of the sharded model (1: FSDP2 over all `rest` processes)."""
    counts = _replica_counts(rest)
    if not counts:
        return 1
    setting = _KEY["dp_replicate_size"]
    default = current.get(setting.name) if current.get(setting.name) in (1, *counts) else 1
    return int(ask_text(
        setting, f"Replicas of the sharded model (dp_replicate_size; 1: shard over all {rest}, else HSDP: one of "
        f"{', '.join(map(str, counts))})?", default,
        check=lambda n: None if n in (1, *counts) else f"give 1 or one of {', '.join(map(str, counts))}",
    ))


def _tensor_parallel_problem(answers: Mapping[str, Any], tp_size: int) -> str | None:
    """Why the answers so far cannot run with `tp_size` (the precision refuses split layers: most FP8
    backends), by the check `accel launch` runs; None when they can."""
    from accel.cli.config.check import check_values
    from accel.cli.errors import CliError

    try:
        check_values({**answers, _KEY["tp_size"].name: tp_size})
    except CliError as error:
        return str(error)
    return None
