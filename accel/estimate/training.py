"""Training memory per rank, before the job: parameters, gradients, optimizer state, communication buffers.

Computed from the parameters' shapes alone (a model on the meta device), for a precision, a layout
and a number of processes, by the rules each part of a run follows:

* precision: "no" keeps the model's dtype; fp16/bf16 (mixed) keep float32 weights (accel makes
  16-bit trainable weights float32 masters) and float32 gradients; bf16-true/16-true hold weights,
  gradients and optimizer state in 16 bits; 64-true in float64;
* native FP8 (fp8-native, -O1, -O2; MS-AMP's levels): without a level, as fp32 (FP8 only inside
  the GEMMs); O1/O2 hold each converted layer's weight in float16 with a scale (frozen ones too), its
  gradient in FP8 with two scales, and O2 steps an FP8 first moment and a float16 second moment with a scale each
  (the layers converted are those accel's conversion picks on the target device, less those whose
  parameters another module shares, which keep float32). Under DDP each rank holds all of that, and
  DDP's buckets only the other trainable parameters' gradients: accel has DDP ignore the converted
  ones and averages their gradients itself, at the step, in a float32 buffer made and freed there.
  Under FSDP2 accel refuses O1/O2 (fully_shard shards param.data and param.grad only), and so does
  this estimate;
* quantization (bitsandbytes, BitsandbytesKwargs' modes): the Linear weights accel's plan quantizes
  are held as quantized.py says (4-bit: packed two a byte, frozen, with their block scales; int8:
  a byte each with a scale per row), each rank keeping the scales whole; the rest of the model
  (adapters, layers kept out, biases) follows the rules here;
* optimizer: AdamW/Adam keep two tensors like each trainable parameter plus a 4-byte `step` per
  parameter (torch's default, on the host); SGD with momentum one tensor; plain SGD none;
* layout: "ddp" replicates everything and adds DDP's gradient buckets (one more copy of the
  gradients DDP reduces, unless `gradient_as_bucket_view`); "fsdp" (FSDP2) shards each parameter on dim 0 in
  chunks of ceil(rows / N): parameters and gradients are held padded to that chunk on every rank,
  optimizer state only for the rank's own rows; "hsdp" (FSDP2 over `shard_size` processes, replicated
  across the groups of them) the same with N = shard_size, the shard index being rank % shard_size.

Checked against what real runs hold (measure.py) in tests/estimate/.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from accel.estimate.quantized import check_mode, quantized_layers, quantized_weight
from accel.quantization.modes import QuantMode

FP8_LEVELS = {"fp8-native": None, "fp8-native-O1": "O1", "fp8-native-O2": "O2"}  # accel bench's names
PRECISIONS = {  # precision -> weight dtype of trainable parameters (None: as the model has them)
    "no": None, "fp16": torch.float32, "bf16": torch.float32, "bf16-true": torch.bfloat16,
    "16-true": torch.float16, "64-true": torch.float64, **dict.fromkeys(FP8_LEVELS, torch.float32),
}
SCALE_BYTES = 4  # one float32 scale
OPTIMIZERS = {"adamw": 2, "adam": 2, "sgd": 0, "sgd-momentum": 1}  # name -> state tensors like each parameter
LAYOUTS = ("ddp", "fsdp", "hsdp")
STEP_BYTES = 4  # Adam's per-parameter `step`, a float32 scalar


@dataclass(frozen=True)
class RankBytes:
    """What one rank holds for training on its device, in bytes (activations excluded), and on the host."""

    rank: int
    parameters: int
    gradients: int
    optimizer: int
    buffers: int  # communication buffers kept between steps (DDP's gradient buckets, ZeRO 3's reduce bucket)
    host: int = 0  # kept in host memory instead (DeepSpeed's offload), not in `total`

    @property
    def total(self) -> int:
        """The device's bytes: parameters, gradients, optimizer state and buffers together."""
        return self.parameters + self.gradients + self.optimizer + self.buffers


@dataclass(frozen=True)
class _Tensor:
    rows: int
    rest: int
    itemsize: int
    trainable: bool
    level: str | None = None  # "O1"/"O2": a converted layer's parameter in MS-AMP's storage
    whole: int = 0  # bytes beside the parameter every rank holds whole (a quantized weight's scales)


def _dtype(parameter: nn.Parameter, precision: str) -> torch.dtype:
    """The dtype `parameter` is held in under `precision` once prepared."""
    target = PRECISIONS[precision]
    if target is None or not parameter.is_floating_point():
        return parameter.dtype
    if precision.endswith("-true") or parameter.requires_grad:  # true precisions convert frozen weights too
        return target
    return parameter.dtype


def _fp8_converted(model: nn.Module, device: str) -> set[int]:
    """ids of the parameters native FP8 keeps in O1/O2 storage on `device` (its default recipe): those of
    the layers it converts, but for layers whose parameters other modules share (they keep float32)."""
    from accel.backends.conversion import plan_conversion
    from accel.backends.fp8.native import NativeFP8
    from accel.backends.fp8.native_model import shared_parameter_ids
    from accel.backends.fp8.small_layers import small_layer_rule
    from accel.kwargs_handlers import FP8RecipeKwargs

    recipe = FP8RecipeKwargs(backend="native")
    scaling = recipe.scaling or NativeFP8.scalings[0]  # as the backend picks its default
    report = plan_conversion(model, exclude_modules=recipe.exclude_modules, is_converted=lambda module: False,
                             conv1d_refusal=None,
                             small_layers=small_layer_rule(recipe.small_layer_dim, scaling, torch.device(device)))
    shared = shared_parameter_ids(model)
    layers = [list(model.get_submodule(decision.name).parameters(recurse=False)) for decision in report.converted]
    return {id(p) for params in layers if not any(id(p) in shared for p in params) for p in params}


def _tensors(
    model: nn.Module, precision: str, device: str, mode: QuantMode | None, ignore_modules: tuple[str, ...], sharded: bool
) -> list[_Tensor]:
    level = FP8_LEVELS.get(precision)
    converted = _fp8_converted(model, device) if level else set()
    quantized = quantized_layers(model, mode, ignore_modules) if mode else {}
    found = []
    for parameter in model.parameters():  # tied parameters once
        itemsize = _dtype(parameter, precision).itemsize
        layer = quantized.get(id(parameter))
        if layer is not None and mode is not None:
            held = quantized_weight(layer, mode, itemsize, sharded)
            found.append(_Tensor(held.rows, held.rest, held.itemsize, held.trainable, whole=held.whole))
            continue
        rows = parameter.shape[0] if parameter.dim() else 1
        kept = level if id(parameter) in converted else None  # frozen ones too: float16, with their scales
        found.append(_Tensor(rows, parameter.numel() // max(rows, 1), itemsize, parameter.requires_grad, kept))
    return found


def _fp8_bytes(t: _Tensor, optimizer: str) -> tuple[int, int, int]:
    """(parameter, gradient, optimizer state) bytes of a converted parameter under O1/O2 on one rank."""
    n = t.rows * t.rest
    if not t.trainable:  # no gradient data, no optimizer state; the FP8 gradient's two scales exist
        return 2 * n + SCALE_BYTES, 2 * SCALE_BYTES, 0
    step = STEP_BYTES if optimizer.startswith("adam") else 0
    state = OPTIMIZERS[optimizer] * 4 * n + step if t.level == "O1" else n + 2 * n + 2 * SCALE_BYTES + step
    return 2 * n + SCALE_BYTES, n + 2 * SCALE_BYTES, state


def _check(
    precision: str, layout: str, processes: int, optimizer: str, shard_size: int | None, quantization: str | None
) -> QuantMode | None:
    """ValueError for what is not estimated, or what accel refuses to run; the quantization mode, if any."""
    for name, value, accepted in (("precision", precision, PRECISIONS), ("layout", layout, LAYOUTS),
                                  ("optimizer", optimizer, OPTIMIZERS)):
        if value not in accepted:
            raise ValueError(f"{name}={value!r} is not estimated; accepted: {', '.join(accepted)}")
    if processes < 1:
        raise ValueError(f"processes={processes} must be at least 1")
    if layout == "hsdp" and (shard_size is None or shard_size < 1 or processes % shard_size):
        raise ValueError(f"layout='hsdp' needs shard_size, a divisor of processes={processes} (got {shard_size}): "
                         "the processes each group shards over (ParallelismConfig's dp_shard_size)")
    level = FP8_LEVELS.get(precision)
    if level and layout != "ddp":
        from accel.backends.fp8.native import NATIVE_FSDP_STORAGE

        raise ValueError(f"precision={precision!r} with layout={layout!r}: accel refuses FP8RecipeKwargs("
                         f"optimization_level={level!r}) on backend='native' under FSDP: {NATIVE_FSDP_STORAGE} "
                         "Estimate precision='fp8-native' (FP8 GEMMs, sharded high-precision storage) or layout='ddp'")
    if level == "O2" and not optimizer.startswith("adam"):
        raise ValueError(f"precision={precision!r} with optimizer={optimizer!r}: O2 steps Adam and AdamW only")
    return None if quantization is None else check_mode(quantization, layout != "ddp", precision)


def training_bytes(
    model: nn.Module, precision: str = "no", layout: str = "ddp", processes: int = 1, optimizer: str = "adamw",
    gradient_as_bucket_view: bool = False, device: str = "cuda", shard_size: int | None = None,
    quantization: str | None = None, ignore_modules: tuple[str, ...] = (),
) -> list[RankBytes]:
    """Each rank's bytes for training `model` (built on the meta device or not: only shapes are read).

    Args:
        model: the model, as the script builds it (its parameters' dtypes are the "no" precision's).
        precision: an accel precision: "no", "fp16", "bf16", "bf16-true", "16-true", "64-true", or native
            FP8 as `accel bench` names it: "fp8-native", "fp8-native-O1", "fp8-native-O2".
        layout: "ddp" (one process or DDP), "fsdp" (FSDP2, every parameter sharded over all processes) or
            "hsdp" (FSDP2 over `shard_size` processes, replicated across the groups).
        processes: the number of processes.
        optimizer: "adamw", "adam", "sgd" or "sgd-momentum".
        gradient_as_bucket_view: DDP's option: gradients are views of its buckets (no second copy).
        device: the device type the job runs on ("cuda", "cpu"): which layers native FP8 converts
            depends on it (on a GPU, layers too small to gain are left out).
        shard_size: "hsdp"'s shard group size (ParallelismConfig's dp_shard_size).
        quantization: a BitsandbytesKwargs mode ("nf4", "nf4-dq", "fp4", "fp4-dq", "int8", "int8-training"):
            the Linear layers accel quantizes are held quantized (quantized.py); None: no quantization.
        ignore_modules: BitsandbytesKwargs.ignore_modules, the modules whose Linear layers stay unquantized.

    Returns:
        One RankBytes per rank, in rank order.

    Example:
        >>> with torch.device("meta"):
        ...     model = torch.nn.Linear(4096, 4096)
        >>> training_bytes(model, "bf16", "fsdp", processes=8)[0].total  # (4 + 4 + 8) x 4096 x 4097 / 8, 2 steps
        33562632
    """
    mode = _check(precision, layout, processes, optimizer, shard_size, quantization)
    shards = processes if layout == "fsdp" else shard_size if layout == "hsdp" else 1
    tensors = _tensors(model, precision, device, mode, tuple(ignore_modules), layout != "ddp")
    states = OPTIMIZERS[optimizer]
    ranks = []
    for rank in range(processes):
        parameters = gradients = state = reduced = 0
        for t in tensors:
            if t.level:  # outside DDP's buckets: accel averages these gradients itself
                held_parameter, held_gradient, held_state = _fp8_bytes(t, optimizer)
                parameters, gradients, state = parameters + held_parameter, gradients + held_gradient, state + held_state
                continue
            if shards and shards > 1:
                chunk = math.ceil(t.rows / shards)
                held = chunk * t.rest * t.itemsize  # padded to the chunk on every rank
                own = max(0, min(chunk, t.rows - rank % shards * chunk)) * t.rest * t.itemsize
            else:
                held = own = t.rows * t.rest * t.itemsize
            parameters += held + t.whole
            if t.trainable:
                gradients, reduced = gradients + held, reduced + held
                state += states * own + (STEP_BYTES if optimizer.startswith("adam") else 0)
        buffers = reduced if layout == "ddp" and processes > 1 and not gradient_as_bucket_view else 0
        ranks.append(RankBytes(rank, parameters, gradients, state, buffers))
    return ranks
