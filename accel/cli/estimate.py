"""`accel estimate-memory MODEL`: Accelerate's table for loading a model, and with `--training`, what
each rank holds to train it (parameters, gradients, optimizer state, communication buffers) in the
precisions, layout and number of processes asked for, and whether that fits a device.

The layout is read as `accel launch` reads it: a config file (`--config_file`) and the launch's own flags
for FSDP, the device mesh, DeepSpeed and bitsandbytes (accel.estimate.layout); `--layout fsdp|hsdp` and
`--dp_shard_size` are this command's shorthand for the same settings.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import TYPE_CHECKING, Any

from accel.cli.arguments import add_setting_flags, given_settings
from accel.cli.errors import CliError
from accel.settings import PARALLELISM_SIZE_SETTINGS, SETTINGS_BY_NAME, USE_DEEPSPEED, USE_FSDP

if TYPE_CHECKING:
    from accel.estimate.activations import ActivationBytes
    from accel.estimate.layout import Layout

COMMAND = "accel estimate-memory"
LAYOUT_SETTINGS = (USE_FSDP, *PARALLELISM_SIZE_SETTINGS, USE_DEEPSPEED, *(SETTINGS_BY_NAME[name] for name in (
    "deepspeed_config_file", "zero_stage", "offload_optimizer_device", "offload_param_device", "bnb_mode")))
"""The launch settings that shape what a rank holds: flags of both commands, keys of the same config file."""
_UNITS = {"": 1, "B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4,
          "KIB": 1024, "MIB": 1024**2, "GIB": 1024**3, "TIB": 1024**4}


def add_parser(subparsers: Any) -> None:
    """Register `accel estimate-memory` (Accelerate's flags, plus the training ones)."""
    parser = subparsers.add_parser(
        "estimate-memory", help="how much memory a model needs to load, and to train per rank",
        description="Build the model on the meta device (nothing downloaded, nothing allocated) and print "
        "Accelerate's table for loading it; with --training, what each rank holds to train it.",
    )
    parser.add_argument("model_name", help="a transformers folder or cached Hub name, a preset (gpt: the example "
                        "GPT; llama3-8b, llama3-70b), or module:function returning an nn.Module")
    parser.add_argument("--library_name", choices=["timm", "transformers"], help="the model's library (Accelerate's flag)")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float16", "int8", "int4"],
                        choices=["float32", "float16", "int8", "int4"], help="dtypes of the loading table")
    parser.add_argument("--trust_remote_code", action="store_true", help="accepted for Accelerate's invocations; "
                        "no remote code runs here (only config.json is read)")
    parser.add_argument("--training", action="store_true", help="also the per-rank training table")
    parser.add_argument("--mixed_precision", nargs="+", metavar="PRECISION",
                        help="precisions of the training table: no, fp16, bf16, bf16-true, 16-true, 64-true, "
                        "fp8-native, fp8-native-O1, fp8-native-O2 (default: the config file's, else no, bf16 "
                        "and bf16-true)")
    parser.add_argument("--cpu", action="store_true", help="for a run on the CPU (which layers native FP8 converts "
                        "depends on the device; default: a GPU)")
    parser.add_argument("--config_file", "--config-file", metavar="PATH", help="read the layout, processes and "
                        "precision from this config file (accel config's, or Accelerate's)")
    parser.add_argument("--layout", choices=["ddp", "fsdp", "hsdp"], help="shorthand: ddp (or one process), fsdp "
                        "(--use_fsdp: FSDP2 over every process), hsdp (FSDP2 over --dp_shard_size); default: from "
                        "the settings below, else ddp")
    parser.add_argument("--dp_shard_size", type=int, help="hsdp: the processes each group shards over "
                        "(ParallelismConfig's dp_shard_size)")
    parser.add_argument("--num_processes", type=int, help="processes (ranks) of the training table (default: "
                        "the config file's, else 1)")
    parser.add_argument("--optimizer", default="adamw", choices=["adamw", "adam", "sgd", "sgd-momentum"])
    parser.add_argument("--batch_size", type=int, help="sequences per micro-batch on one rank: adds the activations "
                        "(with --seq_len)")
    parser.add_argument("--seq_len", type=int, help="tokens per sequence (with --batch_size)")
    parser.add_argument("--activation_checkpointing", action="store_true",
                        help="the model's blocks checkpointed (accel's activation_checkpointing=True): their "
                        "activations are recomputed in backward")
    parser.add_argument("--device_memory", metavar="SIZE", help="say whether the largest rank fits, e.g. 80GB")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    add_setting_flags(parser, LAYOUT_SETTINGS, "the layout, as accel launch takes it (override --config_file)")
    parser.set_defaults(handler=run, command=COMMAND)


def parse_size(text: str) -> int:
    """'80GB' -> bytes (KB/MB/GB/TB are powers of 1024, as the table prints them)."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", text)
    if match is None or match.group(2).upper() not in _UNITS:
        raise CliError(f"--device_memory {text!r} is not a size: write e.g. 80GB, 24GiB or 512MB", command=COMMAND)
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def run(args: argparse.Namespace) -> int:
    """The command: build the model, print the tables (or JSON)."""
    from accel.estimate.models import build_on_meta
    from accel.estimate.sizes import inference_rows

    if args.library_name == "timm":
        raise CliError("--library_name timm is not estimated yet: pass a transformers model or module:function",
                       command=COMMAND)
    device = parse_size(args.device_memory) if args.device_memory else None
    if (args.batch_size is None) != (args.seq_len is None) or any(
            value is not None and value < 1 for value in (args.batch_size, args.seq_len)):
        raise CliError(f"--batch_size {args.batch_size} --seq_len {args.seq_len}: give both, each at least 1, "
                       "for the activations (or neither)", command=COMMAND)
    if args.dp_shard_size is not None and args.layout != "hsdp":
        raise CliError(f"--dp_shard_size {args.dp_shard_size} is for --layout hsdp (the layout is {args.layout}): "
                       "add --layout hsdp, or leave it out", command=COMMAND)
    try:
        values = settings_in_force(args)
        layout, precisions = _layout(values), _precisions(args, values)
        model = build_on_meta(args.model_name, args.library_name, lm_head=False)
        rows = inference_rows(model, args.dtypes)
        training = _training(args, layout, precisions, device) if args.training else []
    except ValueError as error:
        raise CliError(str(error), command=COMMAND) from None
    if args.json:
        print(json.dumps({"model": args.model_name, "loading": [dict(zip(_HEADERS, row)) for row in rows],
                          **({"layout": layout.describe()} if training else {}), "training": training}, indent=2))
        return 0
    print(ascii_table(_HEADERS, rows, f"Memory Usage for loading `{args.model_name}`"))
    if training:
        print(training_table(args, layout, training))
    return 0


def training_table(args: argparse.Namespace, layout: Layout, training: list[dict[str, Any]]) -> str:
    """The per-rank table (the largest rank of each precision) and the line under it saying the setup."""
    title = f"Training `{args.model_name}`, per rank"
    setup = f"{layout.describe()}, {args.optimizer}"
    activations = args.batch_size is not None
    headers = [*_TRAINING_HEADERS[:-2], *(["activations"] if activations else []), *_TRAINING_HEADERS[-2:]]
    keys = [*_KEYS[:-1], *(["activations"] if activations else []), "total"]
    if activations:
        setup += f", micro-batch {args.batch_size}x{args.seq_len}" + (
            ", blocks checkpointed" if args.activation_checkpointing else "")
    table = ascii_table(headers, [[row["precision"], *(_shown(row[key]) for key in keys), _fits(row)]
                                  for row in training], title)
    unknown = any(row[key] is None for row in training for key in ("activations", "total") if key in row)
    if any(row["host"] for row in training):
        setup += "; in host memory (offload): " + ", ".join(f"{_shown(row['host'])} ({row['precision']})"
                                                            for row in training)
    lines = [table, f"{setup}; '-': not estimated (docs/memory.md)" if unknown else setup]
    if any(row["communication"] for row in training):
        kinds = ("all_reduce", "all_gather", "reduce_scatter", "sent")
        lines.append(ascii_table(["precision", "all-reduce", "all-gather", "reduce-scatter", "sent (ring)"],
                                 [[row["precision"], *(_shown(row["communication"][kind] if row["communication"]
                                                              else None) for kind in kinds)] for row in training],
                                 "Communication per rank and optimizer step"))
    return "\n".join(lines)


def settings_in_force(args: argparse.Namespace) -> dict[str, Any]:
    """The launch settings the estimate is for: the config file's, the flags over them, this command's
    shorthand (--layout, --dp_shard_size, --num_processes) over both."""
    from accel.cli.config.file import active_config

    values = dict(active_config(args.config_file, COMMAND, planning=True).values) if args.config_file else {}
    values.update(given_settings(args, LAYOUT_SETTINGS))
    if args.num_processes is not None:
        values["num_processes"] = args.num_processes
    processes = int(values.get("num_processes") or 1)
    if args.layout in ("fsdp", "hsdp"):
        values["use_fsdp"] = True
    if args.layout == "hsdp":
        shard = args.dp_shard_size
        if shard is None or shard < 1 or processes % shard:
            raise ValueError(f"layout='hsdp' needs shard_size, a divisor of processes={processes} (got {shard}): the "
                             "processes each group shards over (ParallelismConfig's dp_shard_size)")
        values.update(parallelism_config_dp_shard_size=shard, parallelism_config_dp_replicate_size=processes // shard)
    return values


def _layout(values: dict[str, Any]) -> Layout:
    from accel.estimate.layout import layout_from_settings

    return layout_from_settings(values)


def _precisions(args: argparse.Namespace, values: dict[str, Any]) -> list[str]:
    from accel.estimate.layout import precision_from_settings

    if args.mixed_precision:
        return list(args.mixed_precision)
    return [precision_from_settings(values)] if args.config_file else ["no", "bf16", "bf16-true"]


_HEADERS = ["dtype", "Largest Layer", "Total Size", "Training using Adam"]
_KEYS = ("parameters", "gradients", "optimizer", "buffers", "total")
_TRAINING_HEADERS = ["precision", "parameters", "gradients", "optimizer state", "comm buffers", "total", "fits"]


def _training(args: argparse.Namespace, layout: Layout, precisions: list[str], device: int | None
              ) -> list[dict[str, Any]]:
    from accel.estimate.models import build_on_meta
    from accel.estimate.per_rank import estimate_ranks
    from accel.estimate.training import FP8_LEVELS

    found = []
    for precision in precisions:
        ranks = estimate_ranks(lambda: build_on_meta(args.model_name, args.library_name), layout, precision,
                               args.optimizer, device="cpu" if args.cpu else "cuda")
        largest = max(ranks, key=lambda r: r.total)
        row: dict[str, Any] = {"precision": precision, "rank": largest.rank,
                               **{key: getattr(largest, key) for key in _KEYS}, "host": largest.host}
        if args.batch_size is not None:
            row["activations"] = None
            if precision not in FP8_LEVELS and not layout.quantization:  # FP8's and 4/8-bit's: not yet, said as "-"
                measured = _activations(args, precision)
                row["activations"] = measured.checkpointed if args.activation_checkpointing else measured.saved
            row["total"] = None if row["activations"] is None else row["total"] + row["activations"]
        row["fits"] = None if device is None or row["total"] is None else row["total"] <= device
        row["communication"] = _communication(args, layout, precision)
        found.append(row)
    return found


def _communication(args: argparse.Namespace, layout: Layout, precision: str) -> dict[str, int] | None:
    """Bytes a rank hands to each collective kind per optimizer step, where estimated (per_rank.py)."""
    from accel.estimate.models import build_on_meta
    from accel.estimate.per_rank import estimate_communication

    sent = estimate_communication(lambda: build_on_meta(args.model_name, args.library_name), layout, precision,
                                  args.batch_size, args.seq_len, "cpu" if args.cpu else "cuda")
    if sent is None:
        return None
    return {"all_reduce": sent.all_reduce, "all_gather": sent.all_gather, "reduce_scatter": sent.reduce_scatter,
            "sent": round(sent.ring_bytes)}


def _activations(args: argparse.Namespace, precision: str) -> ActivationBytes:
    """The activations of a fresh meta model (the measurement makes its parameters fake)."""
    from accel.estimate.activations import activation_bytes
    from accel.estimate.models import build_on_meta

    try:
        return activation_bytes(build_on_meta(args.model_name, args.library_name), args.batch_size, args.seq_len,
                                precision)
    except (RuntimeError, NotImplementedError, TypeError, IndexError) as error:  # the forward on fake tensors
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"{args.model_name}: its forward on a {args.batch_size}x{args.seq_len} micro-batch of token "
                         f"ids could not run on fake tensors ({first}); leave out --batch_size and --seq_len for "
                         "the rest of the table") from None


def _shown(value: int | None) -> str:
    from accel.estimate.sizes import convert_bytes

    return "-" if value is None else convert_bytes(value)


def _fits(row: dict[str, Any]) -> str:
    return "-" if row["fits"] is None else ("yes" if row["fits"] else "no")


def ascii_table(headers: list[str], rows: list[list[str]], title: str) -> str:
    """A boxed table with a centred title, character for character as Accelerate's `estimate-memory` draws
    it (where the title is wider than the columns, its last column is widened, the frame as Accelerate's)."""
    widths = [max(len(value) for value in [*(row[i] for row in rows), headers[i]]) for i in range(len(headers))]
    formats = list(widths)  # the printf widths are fixed before any widening
    extra = 0

    def line(left: str, middle: str, right: str) -> str:
        return left + middle.join("─" * width for width in widths) + "─" * extra + right

    if len(title) > sum(widths):
        extra = abs(len(title) - len(line("├", "┼", "┤")))
        widths[-1] += extra
    separator = line("├", "┼", "┤")
    framed = [line("┌", "─", "┐"), "│" + title.center(len(separator) - 2) + "│", line("├", "┬", "┤")]
    widths[-1] += extra

    def row(values: list[str]) -> str:
        return "│" + "│".join(f"%{f}s" % v.center(w) for v, f, w in zip(values, formats, widths)) + "│"

    return "\n".join([*framed, row(headers), separator, *(row(r) for r in rows),
                      "└" + "┴".join("─" * width for width in widths) + "┘"])
