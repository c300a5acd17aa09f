"""Starting training processes for the checkpoint tests: a fork server, and fresh interpreters."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
CHILD = HERE / "checkpoint_child.py"


class ForkServer:
    """Talks to `checkpoint_child.py serve`: each `start` runs jobs in a new process and says how it ended."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, str(CHILD), "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=HERE
        )

    def start(self, jobs: list[dict[str, Any]], log: Path, kill_after: float | None = None,
              die_at: int | None = None) -> dict[str, Any]:
        request = {"jobs": jobs, "log": str(log), "kill_after": kill_after, "die_at": die_at}
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the fork server died (exit status {self._process.wait()})")
        return json.loads(line)

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait(timeout=30)


def run_fresh(jobs: list[dict[str, Any]], timeout: float = 120) -> None:
    """Run jobs in a new Python interpreter (nothing inherited but the files); raise if it fails."""
    result = subprocess.run(
        [sys.executable, str(CHILD), "run", json.dumps(jobs)], capture_output=True, text=True, cwd=HERE,
        timeout=timeout,
    )
    if result.returncode != 0:
        raise AssertionError(f"child failed with exit status {result.returncode}:\n{result.stderr[-4000:]}")
