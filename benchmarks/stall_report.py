"""How long after a stall begins `accel launch` reports it.

Two CPU processes (gloo): rank 1 sleeps while rank 0 waits in a gather (or at a barrier). Rank 0
prints the time just before it enters the collective; this script reads the launcher's stderr as
it comes and notes when the report's first line arrives. The delay over stall_report_after is the
watch's polling (every 0.5 s) plus asking the ranks for their stacks.

    python benchmarks/stall_report.py                      # stall_report_after 3 and 10, gather and barrier
    python benchmarks/stall_report.py --after 60 --cases gather
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = """\
import sys, time
import torch
from accel import Accelerator

accelerator = Accelerator()
case, late = sys.argv[1], float(sys.argv[2])
if accelerator.process_index == 1:
    time.sleep(late)
else:
    print("ENTER", time.time(), flush=True)
if case == "gather":
    accelerator.gather(torch.ones(1))
else:
    accelerator.wait_for_everyone()
"""


def measure(script: Path, case: str, after: int) -> float:
    """Seconds from rank 0 entering the collective to the report's first line, minus `after`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_")}
    command = [sys.executable, "-m", "accel", "launch", "--num_processes", "2", "--cpu", "--stall_report_after",
               str(after), str(script), case, str(after + 6)]
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stderr is not None
    entered = float(next(line for line in child.stdout if line.startswith("ENTER")).split()[1])
    reported = next((time.time() for line in child.stderr if " stall: " in line), None)
    child.communicate(timeout=after + 120)
    if reported is None or child.returncode != 0:
        raise SystemExit(f"no report, or the run failed (status {child.returncode})")
    return reported - entered - after


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--after", default="3,10", help="comma list of stall_report_after values")
    parser.add_argument("--cases", default="gather,barrier", help="comma list of gather,barrier")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "stall.py"
        script.write_text(SCRIPT)
        print("case     after s  delay over after s (each run)")
        for case in args.cases.split(","):
            for after in (int(a) for a in args.after.split(",")):
                delays = [measure(script, case, after) for _ in range(args.repeat)]
                print(f"{case:8} {after:7}  {', '.join(f'{d:.2f}' for d in delays)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
