"""Start-up weight of accel against Accelerate: time and modules to the first optimizer step.

    python benchmarks/startup.py [--runs 7] [--skip-launch]

Three cases, each run as a fresh process for accel and for Accelerate (installed in the same
environment, the same torch), the two taking turns round after round so that a load that comes and
goes falls on both alike; the table gives medians and the ratio accel / Accelerate of the medians:

* ``construct``: ``import`` the package and build ``Accelerator(cpu=True)``;
* ``fp32 step`` / ``bf16 step``: also prepare a tiny model, optimizer and dataloader and take one
  optimizer step (torch itself loads dynamo and sympy at the first step, for both);
* ``2-process step``: ``accel launch --cpu --num_processes 2`` against Accelerate's script under
  ``torchrun --nproc_per_node 2`` (gloo), from the command to both processes' exit.

Each in-process case also prints how many modules it loaded after ``import torch``, and which of
the heavy families (``torch.distributed.checkpoint``, ``.tensor``, ``.elastic``, ``.fsdp``,
``accel.backends.native_fp8``, ``deepspeed``) it loaded: a plain run of accel must load none that
Accelerate does not (tests/test_imports.py pins the families).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FAMILIES = (
    "torch.distributed.checkpoint", "torch.distributed.tensor", "torch.distributed.elastic",
    "torch.distributed.fsdp", "accel.backends.native_fp8", "deepspeed",
)

BODY = {
    "construct": "acc = Accelerator(cpu=True)\n",
    "fp32 step": """\
acc = Accelerator(cpu=True, mixed_precision="{precision}")
model = torch.nn.Linear(8, 4)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(16, 8), torch.randn(16, 4)), batch_size=4)
model, opt, data = acc.prepare(model, opt, data)
for x, y in data:
    with acc.accumulate(model):
        acc.backward(torch.nn.functional.mse_loss(model(x), y))
        opt.step()
        opt.zero_grad()
    break
""",
}

SCRIPT = """\
import sys, json
import torch
before = set(sys.modules)
from {package} import Accelerator
{body}
loaded = set(sys.modules) - before
families = sorted({{f for f in {families!r} for m in loaded if m == f or m.startswith(f + ".")}})
print("STARTUP " + json.dumps({{"modules": len(loaded), "families": families}}))
"""

LAUNCH_SCRIPT = """\
import torch
from {package} import Accelerator
acc = Accelerator(cpu=True)
model = torch.nn.Linear(8, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt = acc.prepare(model, opt)
acc.backward(model(torch.randn(4, 8)).sum())
opt.step()
"""


def in_process_script(case: str, package: str) -> str:
    """The Python source of one in-process case for ``package`` ("accel" or "accelerate")."""
    precision = "bf16" if case.startswith("bf16") else "no"
    body = BODY["construct" if case == "construct" else "fp32 step"].format(precision=precision)
    return SCRIPT.format(package=package, body=body, families=FAMILIES)


FAILURES: dict[str, list[str]] = {}  # command's first words -> the end of each failed run's errors (retried)


def run(command: list[str], tries: int = 3) -> tuple[float, dict[str, object]]:
    """Wall seconds of ``command`` and what it printed after ``STARTUP`` (empty for launches).

    A failed run is retried (up to ``tries`` runs in all), not timed, and listed under the table:
    under torchrun, Accelerate's 2-process script (which never destroys its process group) now and then
    ends with a rank aborted by SIGABRT at exit."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        if tries <= 1:
            raise RuntimeError(f"{command} failed:\n{done.stderr[-2000:]}")
        FAILURES.setdefault(" ".join(command[1:4]), []).append(done.stderr.strip().splitlines()[-3:][0])
        return run(command, tries - 1)
    report = [line for line in done.stdout.splitlines() if line.startswith("STARTUP ")]
    return seconds, json.loads(report[0].removeprefix("STARTUP ")) if report else {}


def commands(folder: Path, skip_launch: bool) -> dict[str, dict[str, list[str]]]:
    """Case -> {"accel": command, "Accelerate": command}."""
    python = sys.executable
    cases: dict[str, dict[str, list[str]]] = {}
    for case in ("construct", "fp32 step", "bf16 step"):
        cases[case] = {
            name: [python, "-c", in_process_script(case, package)]
            for name, package in (("accel", "accel"), ("Accelerate", "accelerate"))
        }
    if not skip_launch:
        for package in ("accel", "accelerate"):
            (folder / f"run_{package}.py").write_text(LAUNCH_SCRIPT.format(package=package))
        cases["2-process step"] = {
            "accel": [python, "-m", "accel", "launch", "--cpu", "--num_processes", "2", str(folder / "run_accel.py")],
            "Accelerate": [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(folder / "run_accelerate.py")],
        }
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="rounds; each runs every command once (default 7)")
    parser.add_argument("--skip-launch", action="store_true", help="leave out the 2-process case")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        cases = commands(Path(folder), args.skip_launch)
        for pair in cases.values():  # warm the file cache and torch's first-run caches, not counted
            for command in pair.values():
                run(command)
        times: dict[tuple[str, str], list[float]] = {}
        reports: dict[tuple[str, str], dict[str, object]] = {}
        for round_index in range(args.runs):
            for case, pair in cases.items():
                names = list(pair) if round_index % 2 == 0 else list(reversed(pair))
                for name in names:
                    seconds, report = run(pair[name])
                    times.setdefault((case, name), []).append(seconds)
                    reports[(case, name)] = report
    print(f"{'case':16} {'accel s':>8} {'Accelerate s':>13} {'ratio':>6} {'modules (accel / Accelerate)':>30}  families")
    for case in cases:
        accel, accelerate = (statistics.median(times[(case, name)]) for name in ("accel", "Accelerate"))
        mine, theirs = reports[(case, "accel")], reports[(case, "Accelerate")]
        modules = f"{mine.get('modules', '-')} / {theirs.get('modules', '-')}"
        families = f"{mine.get('families', '-')} / {theirs.get('families', '-')}"
        print(f"{case:16} {accel:8.2f} {accelerate:13.2f} {accel / accelerate:6.2f} {modules:>30}  {families}")
    print(f"medians of {args.runs} interleaved rounds; {sys.version.split()[0]}")
    for command, errors in FAILURES.items():
        print(f"failed and retried, not timed: {command}: {len(errors)} run(s), e.g. {errors[0]!r}")


if __name__ == "__main__":
    main()
