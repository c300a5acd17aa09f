"""A stalled rank is named with its stack while the others wait, and training goes on.

Real `accel launch` runs of two processes (gloo, CPU): rank 1 sleeps while rank 0 waits in a
gather, at wait_for_everyone(), or in backward (DDP's all-reduce); rank 0 evaluates alone while
rank 1 waits. Each prints one report naming the missing rank and the line it is on, and the run
ends as it would have without the report. A collective that does time out comes with the stack of
the rank that never joined.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses os.mkfifo and /proc-free pipes")

STALL = """\
import sys, time
import torch
from accel import Accelerator

accelerator = Accelerator()
model = accelerator.prepare(torch.nn.Linear(2, 1))
case, late = sys.argv[1], float(sys.argv[2])


def evaluate():
    time.sleep(late)  # the main process evaluates alone


def done():  # one write: print() writes its parts one by one under PYTHONUNBUFFERED, and the two ranks' interleave
    sys.stdout.write(f"done {accelerator.process_index}\\n")
    sys.stdout.flush()


if case == "evaluation":
    if accelerator.is_main_process:
        evaluate()
    accelerator.wait_for_everyone()
    done()
    sys.exit(0)
if accelerator.process_index == 1:
    time.sleep(late)  # rank 1 is late
if case == "gather":
    result = accelerator.gather(torch.ones(1))
elif case == "barrier":
    accelerator.wait_for_everyone()
elif case == "backward":
    accelerator.backward(model(torch.ones(4, 2)).sum())
done()
"""

REPORT = re.compile(
    r"accel launch: stall\.py: stall: rank (\d) of 2 has waited (\d+) s in (.+), which rank (\d) has not joined\. "
    r"Training goes on"
)


@pytest.fixture
def stall_script(tmp_path: Path) -> Path:
    script = tmp_path / "stall.py"
    script.write_text(STALL)
    return script


def _launch(run_accel, script: Path, *args: str) -> tuple[object, float]:
    start = time.monotonic()
    result = run_accel("launch", "--num_processes", "2", "--cpu", *args, timeout=90)
    return result, time.monotonic() - start


def _reports(stderr: str) -> list[tuple[str, ...]]:
    return [match.groups() for match in REPORT.finditer(stderr)]


@pytest.mark.parametrize(("case", "operation"), [("gather", "gather"), ("barrier", "wait_for_everyone (barrier)"),
                                                 ("backward", "backward (DDP's gradient all-reduce)")])
def test_a_sleeping_rank_is_named_with_the_line_it_sleeps_on(run_accel, stall_script: Path, case: str, operation: str) -> None:
    result, seconds = _launch(run_accel, stall_script, "--stall_report_after", "3", str(stall_script), case, "9")
    assert result.returncode == 0, result.stderr
    assert sorted(re.findall(r"done \d", result.stdout)) == ["done 0", "done 1"]  # training went on
    assert _reports(result.stderr) == [("0", "3", operation, "1")], result.stderr  # once per stall
    assert "rank 1 is in none of accel's collectives; its threads now:" in result.stderr
    assert re.search(r'File ".*stall\.py", line 26, in <module>\n\s+time\.sleep\(late\)  # rank 1 is late', result.stderr)
    call = {"gather": "result = accelerator.gather", "barrier": "accelerator.wait_for_everyone()",
            "backward": "accelerator.backward("}[case]
    assert re.search(rf"rank 0 waits in {re.escape(operation)} for \d+ s, called at .*stall\.py, line \d+: "
                     rf"{re.escape(call)}", result.stderr), result.stderr
    assert seconds < 85  # a loaded 2-core machine takes ~20 s to start the two processes


def test_a_long_main_process_evaluation_is_reported_not_stopped(run_accel, stall_script: Path) -> None:
    result, _ = _launch(run_accel, stall_script, "--stall_report_after", "2", "--collective_timeout", "60",
                        str(stall_script), "evaluation", "8")
    assert result.returncode == 0, result.stderr  # both ranks exited 0: the evaluation was not stopped
    assert sorted(re.findall(r"done \d", result.stdout)) == ["done 0", "done 1"], result.stdout
    assert _reports(result.stderr) == [("1", "2", "wait_for_everyone (barrier)", "0")], result.stderr
    assert re.search(r'line 11, in evaluate\n\s+time\.sleep\(late\)  # the main process evaluates alone', result.stderr)


def test_no_report_when_turned_off(run_accel, stall_script: Path) -> None:
    result, _ = _launch(run_accel, stall_script, "--stall_report_after", "0", str(stall_script), "barrier", "4")
    assert result.returncode == 0 and "stall" not in result.stderr, result.stderr


def test_a_collective_timeout_shows_the_stack_of_the_rank_that_never_joined(run_accel, stall_script: Path) -> None:
    result, _ = _launch(run_accel, stall_script, "--stall_report_after", "30", "--collective_timeout", "4",
                        str(stall_script), "gather", "300")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-2:] == [
        "accel launch: rank 1 of 2 never joined rank 0's gather within the collective timeout; it was still running, "
        "and stopped",
        "accel launch: stall.py exited with status 1 (rank 0 of 2)",
    ], result.stderr
    stacks = result.stderr[result.stderr.index("accel launch: rank 1's threads when it was stopped:"):]
    assert re.search(r'line 26, in <module>\n\s+time\.sleep\(late\)  # rank 1 is late', stacks), result.stderr
    assert not _reports(result.stderr)  # the timeout came first


def test_the_setting_is_a_config_key_and_a_variable(run_accel, stall_script: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("stall_report_after: 2\n")
    result, _ = _launch(run_accel, stall_script, "--config_file", str(config), str(stall_script), "barrier", "6")
    assert _reports(result.stderr) == [("0", "2", "wait_for_everyone (barrier)", "1")], result.stderr
    bad = run_accel("launch", "--num_processes", "2", "--cpu", "--stall_report_after", "soon", str(stall_script))
    assert bad.returncode != 0 and "--stall_report_after='soon' is not an integer" in bad.stderr
