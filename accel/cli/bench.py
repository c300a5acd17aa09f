"""`accel bench`: train a model for a few steps in every precision that can run here, and compare.

The model is the example GPT (accel.bench.gpt), or the user's through `--model file.py:function`
(see accel/bench/workload.py for the contract). Each case is a fresh copy of the same model
trained on the same batches through an Accelerator, eager and compiled; a case that cannot run
here is a skipped row with the Accelerator's reason, never an error that ends the run.
"""

from __future__ import annotations

import argparse
import platform
from pathlib import Path
from typing import Any

from accel.cli.errors import CliError, say

COMMAND = "accel bench"
DEFAULT_STEPS = 12
DEFAULT_WARMUP = 2
DEFAULT_BATCH_SIZE = 8
DEFAULT_TOLERANCE = 0.02
DEFAULT_OUTPUT_DIR = "accel_bench"
QUICK_STEPS = 6
QUICK_WARMUP = 1
QUICK_BATCH_SIZE = 2
"""--quick: eager rows only, 6 steps (1 warm-up, so 5 timed rounds) of batches of 2: under a minute on 2 CPU cores."""
COMPILE_GUESS_S = 30
"""What compiling one precision roughly costs (the full run's up-front estimate; 10-60 s on a CPU)."""


def add_parser(subparsers: Any) -> None:
    """Register `accel bench` and its flags."""
    from accel.bench.cases import CASE_NAMES

    parser = subparsers.add_parser(
        "bench", help="compare the precisions that can run here on a model (speed, memory, loss)",
        description="Train a model (the example GPT, or yours with --model) for a few steps in every precision and "
        "FP8 backend that can run here, eager and compiled, and print step time, tokens/s, peak memory, bytes "
        "per parameter and loss; write a CSV and a PNG chart and recommend the fastest choice whose loss stays "
        "close to fp32's.",
    )
    parser.add_argument("--precisions", metavar="LIST", default=",".join(CASE_NAMES),
                        help=f"comma-separated cases (default: all): {', '.join(CASE_NAMES)}")
    parser.add_argument("--steps", type=int, help=f"training steps per case (default {DEFAULT_STEPS}; --quick {QUICK_STEPS})")
    parser.add_argument("--warmup", type=int,
                        help=f"first steps left out of the step time (default {DEFAULT_WARMUP}; --quick {QUICK_WARMUP})")
    parser.add_argument("--batch_size", "--batch-size", type=int,
                        help=f"batch size of the example GPT (default {DEFAULT_BATCH_SIZE}; --quick {QUICK_BATCH_SIZE}; a "
                        "--model hook makes its own)")
    parser.add_argument("--quick", action="store_true",
                        help=f"a first look in under a minute: eager rows only, {QUICK_STEPS} steps, batch "
                        f"{QUICK_BATCH_SIZE}; the recommendation says it is a quick one")
    parser.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (default 1e-3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the model and the batches (default 0)")
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                        help=f"largest relative gap to fp32's final loss for the recommendation (default {DEFAULT_TOLERANCE})")
    parser.add_argument("--model", metavar="FILE.py:FUNCTION",
                        help="your model: a function returning (model, batch_fn) or (model, batch_fn, loss_fn)")
    parser.add_argument("--no_compile", "--no-compile", action="store_true", help="eager rows only (no torch.compile)")
    parser.add_argument("--output_dir", "--output-dir", metavar="DIR", default=DEFAULT_OUTPUT_DIR,
                        help=f"where bench.csv and bench.png go (default ./{DEFAULT_OUTPUT_DIR})")
    parser.add_argument("--no_progress", "--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(handler=run, command=COMMAND)


def run(args: argparse.Namespace) -> int:
    """Run every case, print the table and the recommendation, write the CSV and the chart."""
    from accel.bench.cases import MODES, REFERENCE, select_cases
    from accel.bench.workload import HookError, gpt_workload, hook_workload

    _fill_defaults(args)
    _check_numbers(args)
    try:
        cases = select_cases(_reference_first([*args.precisions.split(",")], REFERENCE))
        work = (hook_workload(args.model, args.steps, args.seed) if args.model
                else gpt_workload(args.steps, args.batch_size, args.seed))
    except (HookError, ValueError) as error:
        raise CliError(str(error), command=COMMAND) from None
    modes = MODES[:1] if args.no_compile or args.quick else MODES
    rows = _run_all(work, cases, modes, args)
    return _report(rows, work.name, args)


def _fill_defaults(args: argparse.Namespace) -> None:
    """--steps, --warmup and --batch_size not given: the quick run's or the full run's defaults."""
    quick = {"steps": QUICK_STEPS, "warmup": QUICK_WARMUP, "batch_size": QUICK_BATCH_SIZE}
    full = {"steps": DEFAULT_STEPS, "warmup": DEFAULT_WARMUP, "batch_size": DEFAULT_BATCH_SIZE}
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)


def estimate(step_s: float, cases: int, modes: tuple[str, ...], steps: int) -> str:
    """The run's length said up front, from one measured fp32 step: every row's steps at that pace, plus a
    compile per precision for the compiled rows (fp16 and bf16 on a CPU without 16-bit matmuls take longer).

    Example: `estimate(0.5, 10, ("eager",), 12)` is "about 1 minute"; a run of less than 30 s of steps is
    "under a minute".
    """
    seconds = step_s * steps * cases * len(modes) + (COMPILE_GUESS_S * cases if "compiled" in modes else 0)
    if seconds < 30:  # start-up and each backend's first call weigh more than the steps: 13 s for 0.3 s of steps
        return "under a minute"
    return f"about {seconds:.0f} s" if seconds < 60 else f"about {round(seconds / 60)} minute" + (
        "s" if round(seconds / 60) != 1 else "")


def _check_numbers(args: argparse.Namespace) -> None:
    """Refuse numbers that cannot make a measurement, naming the flag."""
    if args.steps < 1:
        raise CliError(f"--steps {args.steps}: give at least 1 step.", command=COMMAND)
    if not 0 <= args.warmup < args.steps:
        raise CliError(f"--warmup {args.warmup}: give 0 up to --steps - 1 ({args.steps - 1}), so that a step is "
                       "left to time.", command=COMMAND)
    if args.batch_size < 1:
        raise CliError(f"--batch_size {args.batch_size}: give at least 1.", command=COMMAND)
    if not args.tolerance >= 0:
        raise CliError(f"--tolerance {args.tolerance}: give a relative gap >= 0 (0.02 is 2%).", command=COMMAND)


def _reference_first(names: list[str], reference: str) -> list[str]:
    """The names asked, with the fp32 reference added: the recommendation compares losses with it."""
    names = [name.strip() for name in names if name.strip()]
    return names if reference in (name.lower() for name in names) else [reference, *names]


def _run_all(work: Any, cases: list[Any], modes: tuple[str, ...], args: argparse.Namespace) -> list[Any]:
    """Every case in each mode, all interleaved (see run_cases), with a progress bar over all their steps."""
    from dataclasses import replace

    from accel.bench.flops import flops_per_token
    from accel.bench.report import counted
    from accel.bench.run import load_compiler, run_case, run_cases

    # One untimed fp32 step first: the process's one-time set-up (thread pools, kernel caches) would
    # otherwise be charged to the first case's memory and time; so would loading the compiler.
    warm = run_case(replace(work, batches=work.batches[:1]), cases[0], "eager", 0, args.lr, lambda: None)
    kind = "a quick run: eager only" if args.quick else f"{' and '.join(modes)}"
    guess = estimate((warm.first_step_s or 0.0), len(cases), modes, args.steps)
    say(COMMAND, f"{work.name}: {counted(len(cases), 'precision')} x {counted(len(modes), 'mode')} ({kind}), "
        f"{counted(args.steps, 'step')} each, "
        f"interleaved; {guess} (from one fp32 step here)"
        + ("" if args.quick else "; --quick gives a first look in under a minute"))
    load_compiler()
    flops = flops_per_token(work)
    bar = _progress_bar(len(cases) * len(modes) * args.steps, args.no_progress)
    bar.set_description(f"{len(cases) * len(modes)} rows, interleaved")
    jobs = [(case, mode) for mode in modes for case in cases]  # fp32 eager first: the reference
    rows = run_cases(work, jobs, args.warmup, args.lr, lambda: bar.update(1), flops)
    ran = [row for row in rows if row.tokens_per_s is not None]
    if ran:
        bar.set_postfix_str(_throughput_text(max(ran, key=lambda row: row.tokens_per_s or 0.0)))
    bar.update(bar.total - bar.n)  # skipped and failed rows move the bar to its end
    bar.close()
    return rows


def _throughput_text(row: Any) -> str:
    """A row's speed for the progress bar (the fastest row's, at the end): tokens/s and MFU."""
    mfu = "" if row.mfu is None else f", MFU {row.mfu:.1%}"
    return f"{row.case} {row.mode}: {row.tokens_per_s:,.0f} tokens/s{mfu}"


def _report(rows: list[Any], workload: str, args: argparse.Namespace) -> int:
    """Print the table and the recommendation; write bench.csv and bench.png into --output_dir."""
    from accel.bench.report import counted, format_table, recommend, write_chart, write_csv

    print(f"{workload}, {counted(args.steps, 'step')} per case (step time: median after "
          f"{counted(args.warmup, 'warm-up step')})")
    print(_machine())
    print(format_table(rows))
    recommendation = recommend(rows, args.tolerance).text()
    if args.quick:
        recommendation = (f"Quick run (eager only, {args.steps} steps of batch {args.batch_size}): {recommendation} "
                          "Run without --quick for the compiled rows and steadier timings.")
    print(recommendation)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, out / "bench.csv")
    missing = write_chart(rows, out / "bench.png", workload)
    print(f"Wrote {out / 'bench.csv'}" + (f"; {missing}." if missing else f" and {out / 'bench.png'}."))
    return 0 if any(row.status == "ran" for row in rows) else 1


def _machine() -> str:
    import torch

    from accel.cli import capabilities

    device = capabilities.training_device()
    where = capabilities.cpu_model() if device.type == "cpu" else capabilities.gpu_descriptions()[0]
    return (
        f"on {device} ({where}), {torch.get_num_threads()} threads, torch {torch.__version__}, "
        f"Python {platform.python_version()}"
    )


class _Silent:
    """A stand-in for tqdm's bar when there is none to show: it only counts."""

    def __init__(self, total: int, announce: bool) -> None:
        self.n, self.total, self._announce = 0, total, announce

    def set_description(self, text: str) -> None:
        if self._announce:
            say(COMMAND, f"{text} ({self.n}/{self.total} steps done)")

    def update(self, count: int) -> None:
        self.n += count

    def set_postfix_str(self, text: str) -> None:
        if self._announce:
            say(COMMAND, text)

    def close(self) -> None:
        pass


def _progress_bar(total: int, disabled: bool) -> Any:
    """tqdm's bar on stderr where tqdm is installed; else one status line per case (none if disabled)."""
    if disabled:
        return _Silent(total, announce=False)
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _Silent(total, announce=True)
    return tqdm(total=total, unit="step", leave=False, dynamic_ncols=True)
