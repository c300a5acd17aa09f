"""Running a helper script under `accel launch --num_processes N --cpu`, and reading what each rank reported.

A script reports with `report(name, value)`: one JSON line per value in `<results>/rank<R>.jsonl`
(a file per rank: lines the ranks print to their shared stdout can interleave).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


@dataclass(frozen=True)
class Launched:
    """How a launched run ended, what it printed, and the values each rank reported."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float
    results: dict[int, dict[str, Any]]

    def of(self, name: str) -> list[Any]:
        """The value every rank reported under `name`, in rank order."""
        missing = [rank for rank, values in sorted(self.results.items()) if name not in values]
        assert not missing and self.results, f"no {name!r} from ranks {missing}:\n{self.stdout}\n{self.stderr[-3000:]}"
        return [values[name] for _, values in sorted(self.results.items())]


def launch(
    script: str, *args: str, processes: int = 2, timeout: float = 120, cwd: Path | None = None,
    launcher: list[str] | None = None,
) -> Launched:
    """`python -m accel launch --num_processes N --cpu HERE/script args` in a clean environment.

    `launcher`: another command to put before the script (say torchrun's, to run a script under Accelerate).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "ACCELERATE_", "TORCHELASTIC_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]))
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    if launcher is None:
        launcher = [sys.executable, "-m", "accel", "launch", "--num_processes", str(processes), "--cpu"]
    command = [*launcher, str(HERE / script), *args]
    with tempfile.TemporaryDirectory() as results:
        env[_RESULTS] = results
        start = time.monotonic()
        done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        seconds = time.monotonic() - start
        return Launched(done.returncode, done.stdout, done.stderr, seconds, _results(Path(results)))


_RESULTS = "DISTRIBUTED_TEST_RESULTS"


def _results(folder: Path) -> dict[int, dict[str, Any]]:
    results: dict[int, dict[str, Any]] = {}
    for path in folder.glob("rank*.jsonl"):
        rank = int(path.stem.removeprefix("rank"))
        for line in path.read_text().splitlines():
            name, value = json.loads(line)
            results.setdefault(rank, {})[name] = value
    return results


def report(name: str, value: Any) -> None:
    """In a launched script: report `value` (JSON) under `name` for this rank."""
    with open(Path(os.environ[_RESULTS]) / f"rank{os.environ.get('RANK', '0')}.jsonl", "a") as file:
        file.write(json.dumps([name, value]) + "\n")
