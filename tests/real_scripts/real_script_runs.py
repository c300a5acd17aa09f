"""Running a fixture script, unchanged, under Accelerate or (its imports renamed) under accel, and
reading what it computed.

One process: `python script.py args`. Two processes: Accelerate's launcher cannot start several
CPU processes on one machine without MPI (`accelerate launch --cpu --num_processes 2` runs one
process), so Accelerate's runs use `python -m torch.distributed.run --standalone`, which is how
its own CPU tests start processes, with `ACCELERATE_USE_CPU=true` as `accelerate launch --cpu`
sets it; accel's runs use its launcher, `python -m accel launch
--num_processes 2 --cpu`. Every run has its own working directory holding the hub stand-ins
(real_script_standins) and its own Hugging Face caches (HF_HOME=.hf), no network (HF_*_OFFLINE=1) and a
time limit: a run past it has its whole process group killed and fails the test. The runs go to the test
zygote that has imported the scripts' libraries (tests/zygote.py, kind "hf").
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import zygote
from real_script_standins import link_into

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
RECORDER = HERE / "recorder"
REPOSITORY = HERE.parents[1]
FRAMEWORKS = ("accelerate", "accel")
TIMEOUT = 180.0

_IMPORT = re.compile(r"^(\s*)(from|import)\s+accelerate(\b[.\w]*)(.*)$")


def rename_imports(source: str) -> str:
    """Accelerate's import lines, and only those, renamed to accel.

    `from accelerate[.x] import ...` -> `from accel[.x] import ...`; `import accelerate[.x]` ->
    `import accel[.x] as accelerate[.x]` (the script goes on using the name it imported). Example:
    `rename_imports("from accelerate.utils import set_seed")` is `"from accel.utils import set_seed"`.
    """
    lines = []
    for line in source.splitlines(keepends=True):
        match = _IMPORT.match(line.rstrip("\n"))
        if match is None:
            lines.append(line)
            continue
        indent, keyword, submodule, rest = match.groups()
        if keyword == "from":
            lines.append(f"{indent}from accel{submodule}{rest}\n")
        else:
            alias = "" if " as " in rest else f" as accelerate{submodule}"
            lines.append(f"{indent}import accel{submodule}{alias}{rest}\n")
    return "".join(lines)


@dataclass
class Run:
    """A finished run: how it ended, what it printed, and what each rank recorded."""

    framework: str
    processes: int
    workdir: Path
    record: Path
    returncode: int
    output: str
    seconds: float
    events: dict[int, list[tuple[str, Any]]] = field(default_factory=dict)

    def steps(self, rank: int = 0) -> list[dict[str, Any]]:
        return [value for kind, value in self.events.get(rank, []) if kind == "step"]

    def losses(self, rank: int = 0) -> list[float]:
        return [value for kind, value in self.events.get(rank, []) if kind == "backward"]

    def final_parameters(self, rank: int = 0) -> list[torch.Tensor]:
        return torch.load(self.record / f"rank{rank}.pt", weights_only=True)

    def printed(self, pattern: str) -> list[str]:
        return re.findall(pattern, self.output, re.MULTILINE)

    def check_succeeded(self) -> None:
        assert self.returncode == 0, (f"{self.framework} in {self.processes} process(es) ended with "
                                      f"{self.returncode} after {self.seconds:.0f} s:\n{self.output[-6000:]}")


def _environment(record: Path, seed: int | None, paths: tuple[Path, ...]) -> dict[str, str]:
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACCEL_", "ACCELERATE_", "TORCHELASTIC_", "PET_")) and k not in names}
    env.update(
        PYTHONPATH=os.pathsep.join([str(RECORDER), str(REPOSITORY), *map(str, paths), env.get("PYTHONPATH", "")]),
        REAL_SCRIPTS_RECORD=str(record), OMP_NUM_THREADS="1",
        WANDB_MODE="offline", WANDB_DIR=str(record.parent), WANDB_SILENT="true",
        MLFLOW_TRACKING_URI=(record.parent / "mlruns").as_uri(), MLFLOW_ALLOW_FILE_STORE="true",
        PYTHONUNBUFFERED="1",
    )
    env.update(zygote.KINDS["hf"].settings)  # offline, HF_HOME=.hf (the run's folder), the zygote that holds the libraries
    if seed is not None:
        env["REAL_SCRIPTS_SEED"] = str(seed)
    return env


def write_scripts(fixture: str, framework: str, folder: Path) -> Path:
    """Write `fixture` into `folder` as `framework` runs it (imports renamed for accel); a fixture in a folder of
    its own (`torch_native_parallelism/nd_parallel.py`) brings the modules beside it (its `utils.py`), renamed
    too. Returns the script's path."""
    source = FIXTURES / fixture
    folder.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.parent.glob("*.py")) if source.parent != FIXTURES else [source]:
        text = path.read_text()
        (folder / path.name).write_text(text if framework == "accelerate" else rename_imports(text))
    return folder / source.name


def start(fixture: str, framework: str, processes: int, args: list[str], workdir: Path, standins: Path,
          seed: int | None = None, paths: tuple[Path, ...] = (), record_name: str = "record",
          ) -> tuple[subprocess.Popen[str], Path, float]:
    """Start `fixture` (a file in fixtures/) under `framework` in `processes` processes, in `workdir`
    (`paths`: folders put on the run's PYTHONPATH after the recorder and this repository, such as
    the torchvision stand-in; `record_name`: the folder of `workdir` the recorder writes to, another
    one for a second run in the same folder, such as a resumed run)."""
    link_into(standins, workdir)
    script = write_scripts(fixture, framework, workdir / "script")
    record = workdir / record_name
    record.mkdir(exist_ok=True)
    env = _environment(record, seed, paths)
    if processes == 1:
        command = [sys.executable, str(script), *args]
    elif framework == "accelerate":
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                   str(processes), str(script), *args]
        # What `accelerate launch --cpu` sets: without it (or `Accelerator(cpu=True)`, which only
        # some scripts pass), Accelerate on a machine without a GPU makes each torchrun process a
        # separate single-process run (DistributedType.NO), not one 2-process run.
        env["ACCELERATE_USE_CPU"] = "true"
    else:
        command = [sys.executable, "-m", "accel", "launch", "--num_processes", str(processes), "--cpu",
                   str(script), *args]
    process = subprocess.Popen(command, cwd=workdir, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    return process, record, time.monotonic()


def finish(process: subprocess.Popen[str], record: Path, started: float, framework: str, processes: int,
           timeout: float = TIMEOUT) -> Run:
    """Wait for a started run (at most `timeout` seconds from its start; then kill its process group)."""
    try:
        output, _ = process.communicate(timeout=max(1.0, timeout - (time.monotonic() - started)))
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        output += f"\n[harness] killed after {timeout:.0f} s"
    seconds = time.monotonic() - started
    for path in sorted(record.glob("output_rank*.txt")):  # the other ranks' output (see the recorder)
        output += f"\n[harness] {path.stem.removeprefix('output_')}'s output:\n{path.read_text()}"
    events: dict[int, list[tuple[str, Any]]] = {}
    for path in record.glob("rank*.jsonl"):
        rank = int(path.stem.removeprefix("rank"))
        events[rank] = [tuple(json.loads(line)) for line in path.read_text().splitlines()]  # type: ignore[misc]
    return Run(framework, processes, record.parent, record, process.returncode, output, seconds, events)


def run_both(fixture: str, processes: int, args: list[str], folder: Path, standins: Path,
             seed: int | None = None, timeout: float = TIMEOUT, paths: tuple[Path, ...] = (),
             record_name: str = "record") -> dict[str, Run]:
    """The fixture under Accelerate and under accel, side by side (two cores: they run at once), in
    `folder`/accelerate and `folder`/accel (see `start` for the rest)."""
    started = {framework: start(fixture, framework, processes, args, folder / framework, standins, seed, paths,
                                record_name)
               for framework in FRAMEWORKS}
    return {framework: finish(*started[framework], framework, processes, timeout) for framework in FRAMEWORKS}
