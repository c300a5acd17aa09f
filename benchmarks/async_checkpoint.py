"""How long save_state blocks the training loop: a blocking save against save_state(async_save=True).

    python benchmarks/async_checkpoint.py [--width 2048] [--saves 3] [--steps 12] [--processes 1 2]

Trains an MLP (`--width` 2048: 4 layers, 16.8 M parameters, 67 MB of fp32 weights and 134 MB of
AdamW moments: a 201 MB checkpoint) under `accel launch --cpu` with 1 process, then 2 (DDP: the
main process writes the checkpoint), then 2 with FSDP2 (every process writes its shards). Each
run trains `--steps` steps between saves, `--saves` times blocking and `--saves` times
asynchronously, and measures on every process:

* blocked: the time save_state took before the loop could go on (median over the saves; the
  asynchronous one includes waiting for the previous save when it was not finished yet);
* interval: the wall time of `--steps` steps plus the save (median), against the same steps
  without a save: what a save costs the loop in all, the background write's competition for the
  cores included (on a 2-core machine that competition is most of it);
* end wait: how long end_training waited for the last asynchronous write.

The table shows the slowest process. On a GPU the staging copy goes over PCIe instead of memcpy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _timing import format_table  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=2048, help="hidden width of the 4-layer MLP (default 2048)")
    parser.add_argument("--saves", type=int, default=3, help="saves timed per kind (default 3)")
    parser.add_argument("--steps", type=int, default=12, help="training steps between saves (default 12)")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2], help="process counts (default 1 2)")
    parser.add_argument("--no-fsdp", action="store_true", help="skip the FSDP2 runs with several processes")
    parser.add_argument("--cpu", action=argparse.BooleanOptionalAction, default=True, help="train on the CPU")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker is not None:
        return worker(args)
    rows = []
    for processes in args.processes:
        for fsdp in (False, True) if processes > 1 and not args.no_fsdp else (False,):
            rows.append(launch(processes, fsdp, args))
    print(table(rows))
    return 0


def launch(processes: int, fsdp: bool, args: argparse.Namespace) -> dict[str, Any]:
    """Run the worker under accel launch; the slowest process's numbers."""
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "accel", "launch", "--num_processes", str(processes),
                   *(["--cpu"] if args.cpu else []), *(["--use_fsdp"] if fsdp else []), __file__, "--worker", out,
                   "--width", str(args.width), "--saves", str(args.saves), "--steps", str(args.steps)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=3000)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-4000:]}")
        ranks = [json.loads(path.read_text()) for path in sorted(Path(out).glob("rank*.json"))]
    slowest = {key: max(rank[key] for rank in ranks) for key in ranks[0] if isinstance(ranks[0][key], float)}
    return {"run": f"{processes} process{'es' if processes > 1 else ''}{', FSDP2 sharded' if fsdp else ''}",
            "megabytes": ranks[0]["megabytes"], **slowest}


def worker(args: argparse.Namespace) -> int:
    import torch

    from accel import Accelerator, ProjectConfiguration

    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    with tempfile.TemporaryDirectory() as project:
        accelerator = Accelerator(cpu=args.cpu, project_config=ProjectConfiguration(project_dir=project, total_limit=2))
        torch.manual_seed(0)
        width = args.width
        model = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(4)))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        model, optimizer = accelerator.prepare(model, optimizer)
        inputs = torch.randn(32, width, device=accelerator.device)

        def steps() -> None:
            for _ in range(args.steps):
                accelerator.backward(model(inputs).square().mean())
                optimizer.step()
                optimizer.zero_grad()
            if accelerator.device.type == "cuda":
                torch.cuda.synchronize()

        steps()  # warm-up, and AdamW's moments exist from here on
        params = sum(p.numel() for p in accelerator.unwrap_model(model).parameters())
        result: dict[str, Any] = {"megabytes": round(params * 4 * 3 / 1e6)}  # fp32 weights + 2 AdamW moments
        result["interval_no_save_s"] = statistics.median(_timed(steps) for _ in range(args.saves))
        for kind, background in (("sync", False), ("async", True)):
            blocked, intervals = [], []
            for _ in range(args.saves):
                start = time.perf_counter()
                steps()
                blocked.append(_timed(lambda flag=background: accelerator.save_state(async_save=flag)))
                intervals.append(time.perf_counter() - start)
            result[f"{kind}_blocked_s"] = statistics.median(blocked)
            result[f"{kind}_interval_s"] = statistics.median(intervals)
        result["async_end_wait_s"] = _timed(accelerator.end_training)
    rank = accelerator.process_index
    (Path(args.worker) / f"rank{rank}.json").write_text(json.dumps(result))
    return 0


def _timed(action: Any) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def table(rows: list[dict[str, Any]]) -> str:
    headers = ["run", "state MB", "blocked sync s", "blocked async s", "steps alone s", "steps+sync save s",
               "steps+async save s", "end wait s"]
    keys = ["megabytes", "sync_blocked_s", "async_blocked_s", "interval_no_save_s", "sync_interval_s",
            "async_interval_s", "async_end_wait_s"]
    return format_table(headers, [[row["run"], *(round(row[k], 3) if isinstance(row[k], float) else row[k]
                                                 for k in keys)] for row in rows])


if __name__ == "__main__":
    raise SystemExit(main())
