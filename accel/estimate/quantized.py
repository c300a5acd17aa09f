"""What bitsandbytes stores for a Linear layer accel quantizes (BitsandbytesKwargs), in bytes.

training.py asks this module, for an estimate with `quantization=<mode>`, which Linear weights are
quantized and how each is then held. The layers are those accel's quantization plan picks
(accel.quantization.plan.plan_quantization, called here, so that its rules are not repeated: a
layer shared with another module, inside a peft adapter or matched by `ignore_modules` stays as it
is). Its verdict "on the meta device" is taken as "quantized": it is the last rule the plan checks,
so a layer of a meta model that gets it passed every other, and would be quantized once it has values.

What bitsandbytes 0.50 keeps for a layer of n weights and `rows` output features (its
functional.quantize_4bit, quantize_blockwise and nn.Params4bit / Int8Params, read and measured):

* 4-bit (nf4, fp4): the frozen weight packed two values a byte, a uint8 Parameter of shape
  (ceil(n / 2), 1); its QuantState: the absmax of each block of 64 weights (float32) and the 16
  values of the 4-bit code (float32, a tensor per layer). Double quantization ("-dq"): the absmax
  stored as uint8 instead, plus their mean (`offset`, float32), a float32 absmax per 256 blocks and
  the 256 values of the 8-bit code (float32, copied per layer). Under FSDP2 the packed weight is
  sharded like any Parameter and the QuantState kept whole on every rank; accel's
  `address_quant_state` hangs the state's tensors on the sharded weight, the 8-bit code as a copy
  (QuantState.as_dict clones it), so "-dq" holds that code twice there.
* int8 (LLM.int8()): the frozen weight as int8 (n bytes) and its float32 scale per row (SCB).
* int8-training: the weight trains in its own dtype (as any Parameter); each forward leaves its
  int8 copy and row scales in the layer's matmul state (n + 4 x rows bytes), kept until the next.

On CUDA, LLM.int8() (int8, int8-training) also keeps the indices of the last forward's outlier
columns (values above its threshold, 6.0): data-dependent, a few per layer, not counted here.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

from torch import nn

from accel.quantization.modes import MODES, QuantMode

BLOCKSIZE = 64  # bitsandbytes' Params4bit default: weights per absmax
NESTED_BLOCKSIZE = 256  # double quantization: absmax per second-level scale
CODE_BYTES = 16 * 4  # the 4-bit code: 16 float32 values
NESTED_CODE_BYTES = 256 * 4  # the 8-bit code of double quantization: 256 float32 values
OFFSET_BYTES = 4  # double quantization's offset: one float32
SCALE_BYTES = 4  # a float32 block or row scale


@dataclass(frozen=True)
class QuantizedWeight:
    """How one quantized layer's weight is held: the Parameter (`rows` x `rest` of `itemsize` bytes, dim 0
    sharded under FSDP2) and the bytes beside it that every rank keeps whole (its quant state)."""

    rows: int
    rest: int
    itemsize: int
    trainable: bool
    whole: int


def check_mode(mode: str, sharded: bool, precision: str) -> QuantMode:
    """The mode named `mode` (BitsandbytesKwargs.mode), or ValueError where accel refuses it.

    Args:
        mode: "nf4", "nf4-dq", "fp4", "fp4-dq", "int8" or "int8-training".
        sharded: whether the layout is FSDP2's ("fsdp", "hsdp"): accel shards the 4-bit modes only.
        precision: the estimate's precision: accel refuses quantization with FP8.
    """
    if mode not in MODES:
        raise ValueError(f"quantization={mode!r} is not estimated; accepted: {', '.join(MODES)}")
    if precision.startswith("fp8"):
        raise ValueError(f"quantization={mode!r} with precision={precision!r}: accel refuses bitsandbytes with FP8 "
                         "(both replace the model's nn.Linear layers); choose one")
    if sharded and not MODES[mode].is_4bit:
        raise ValueError(f"quantization={mode!r} under FSDP: accel shards only the 4-bit modes (the int8 modes keep "
                         "row scales outside the weight that a shard cannot carry); use DDP, or a 4-bit mode")
    return MODES[mode]


def quantized_layers(model: nn.Module, mode: QuantMode, ignore_modules: tuple[str, ...] = ()) -> dict[int, nn.Linear]:
    """The Linear layers accel would quantize in `mode`, by id of their weight (accel's own plan).

    Args:
        model: the model (on the meta device or not).
        mode: the quantization mode.
        ignore_modules: BitsandbytesKwargs.ignore_modules (fnmatch patterns of modules kept unquantized).

    Raises ValueError, as accel's Quantizer does, when no layer would be quantized.
    """
    from accel.backends.conversion import CONVERTED
    from accel.quantization.plan import META, plan_quantization

    report = plan_quantization(model, mode.name, ignore_modules, _is_quantized)
    names = [d.name for d in report.layers if d.category in (CONVERTED, META)]
    if not names:
        raise ValueError(f"quantization={mode.name!r}: {type(model).__name__} has no nn.Linear layer accel would "
                         f"quantize. {report.details()}")
    layers = {name: model.get_submodule(name) for name in names}
    return {id(layer.weight): layer for layer in layers.values() if isinstance(layer, nn.Linear)}


def _is_quantized(module: nn.Module) -> bool:
    """A bitsandbytes layer already (checked only where bitsandbytes was imported: a model holding one did)."""
    bnb = sys.modules.get("bitsandbytes")
    return bnb is not None and isinstance(module, (bnb.nn.Linear4bit, bnb.nn.Linear8bitLt))


def quant_state_bytes(numel: int, rows: int, mode: QuantMode, sharded: bool = False) -> int:
    """Bytes a quantized weight of `numel` values and `rows` output features keeps beside its Parameter.

    Args:
        numel: the weight's number of values.
        rows: its output features (int8's row scales).
        mode: the quantization mode.
        sharded: under FSDP2 (4-bit "-dq": the 8-bit code once more, on the sharded weight).
    """
    if not mode.is_4bit:
        return rows * SCALE_BYTES + (numel if mode.trainable_weight else 0)  # int8-training: its int8 copy too
    blocks = math.ceil(numel / BLOCKSIZE)
    if not mode.double_quant:
        return blocks * SCALE_BYTES + CODE_BYTES
    nested = blocks + OFFSET_BYTES + math.ceil(blocks / NESTED_BLOCKSIZE) * SCALE_BYTES + NESTED_CODE_BYTES
    return nested + CODE_BYTES + (NESTED_CODE_BYTES if sharded else 0)


def quantized_weight(layer: nn.Linear, mode: QuantMode, itemsize: int, sharded: bool = False) -> QuantizedWeight:
    """How `layer`'s weight is held once quantized in `mode`.

    Args:
        layer: the Linear layer the plan quantizes.
        mode: the quantization mode.
        itemsize: the bytes of one value of the weight as the precision holds it (int8-training's weight).
        sharded: under FSDP2 (see quant_state_bytes).
    """
    numel, rows = layer.weight.numel(), layer.out_features
    whole = quant_state_bytes(numel, rows, mode, sharded)
    if mode.is_4bit:
        return QuantizedWeight(math.ceil(numel / 2), 1, 1, False, whole)
    if mode.trainable_weight:
        return QuantizedWeight(rows, numel // max(rows, 1), itemsize, layer.weight.requires_grad, whole)
    return QuantizedWeight(rows, numel // max(rows, 1), 1, False, whole)
