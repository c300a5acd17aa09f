"""The launcher names the process that failed on its own, not the peers that failed because it left.

Rank 1 leaves a 2-process DDP training loop at step 3 while rank 0 waits for it in the gradient
all-reduce; rank 0 then fails too ("Connection closed by peer") or is stopped by the launcher,
whichever comes first. Either way the last line names rank 1 with its own status, `accel launch`
exits with that status, and a line says rank 0 followed it. Before, a `sys.exit(3)` on rank 1 was
reported as rank 0's status 1 in every run: rank 0's report of the lost connection was the only one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TRAIN = """\
import os, signal, sys, time
from pathlib import Path
import torch
from accel import Accelerator

accelerator = Accelerator()
model = torch.nn.Linear(4, 1)
model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
for step in range(10):
    loss = model(torch.randn(8, 4)).sum()
    if step == 3 and accelerator.process_index == 0:
        Path("rank0-at-step-3").touch()  # next: the all-reduce in backward, where it waits for rank 1
    if step == 3 and accelerator.process_index == 1:
        while not Path("rank0-at-step-3").exists():
            time.sleep(0.01)
        {leave}
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
"""

SIGKILL_LINE = (
    "accel launch: train.py was stopped by SIGKILL (rank 1 of 2): nothing in the process could report why; most "
    "often the kernel's out-of-memory killer (`dmesg` says so) or a job scheduler's limit"
)
FOLLOWED = re.compile(r"^accel launch: rank 0 (?:was )?stopped(?: in [^\n]+)? because rank 1 failed first$", re.MULTILINE)

CASES = [
    pytest.param("sys.exit(3)", 3, "accel launch: train.py exited with status 3 (rank 1 of 2)", 0, id="sys-exit-3"),
    pytest.param("raise ValueError('rank 1 broke at step 3')", 1,
                 "accel launch: train.py exited with status 1 (rank 1 of 2)", 1, id="raise"),
    pytest.param("os.kill(os.getpid(), signal.SIGKILL)", 128 + 9, SIGKILL_LINE, 0, id="sigkill"),
]


@pytest.mark.parametrize(("leave", "status", "last_line", "tracebacks"), CASES)
def test_the_rank_that_left_is_named_with_its_status_and_the_other_followed(
    run_accel, tmp_path: Path, leave: str, status: int, last_line: str, tracebacks: int
) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRAIN.format(leave=leave))
    result = run_accel("launch", "--num_processes", "2", "--cpu", str(script), timeout=120,
                       extra_env={"OMP_NUM_THREADS": "1"})
    lines = result.stderr.strip().splitlines()
    assert result.returncode == status, result.stderr
    assert lines[-1] == last_line, result.stderr
    assert len(FOLLOWED.findall(result.stderr)) == 1, result.stderr  # rank 0 followed rank 1, said once
    assert "Connection closed by peer" not in result.stderr, result.stderr  # rank 0's consequence is no traceback
    assert result.stderr.count("Traceback (most recent call last)") == tracebacks, result.stderr
    if tracebacks:
        assert "[rank1]: ValueError: rank 1 broke at step 3" in result.stderr
