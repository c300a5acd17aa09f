"""The six bitsandbytes modes (Lightning's BitsandbytesPrecision names) and what each one stores.

Nothing here imports bitsandbytes: the table is read by the handler, `accel env` and the docs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from accel.kwargs_handlers.bitsandbytes import BitsandbytesKwargs


@dataclass(frozen=True)
class QuantMode:
    """One mode: which bitsandbytes layer, with which options."""

    name: str
    bits: int
    """Bits per stored weight: 4 or 8; 0 where the weight stays in high precision (int8-training)."""
    quant_type: str | None = None
    """'nf4' or 'fp4' for the 4-bit modes."""
    double_quant: bool = False
    """4-bit: the block scales are quantized too (bitsandbytes' compress_statistics)."""
    trainable_weight: bool = False
    """int8-training: the weight trains in high precision and is quantized to int8 in each forward."""

    @property
    def is_4bit(self) -> bool:
        return self.bits == 4

    def describe(self) -> str:
        """A few words for the conversion report and `accel env`."""
        if self.is_4bit:
            assert self.quant_type is not None  # every 4-bit mode names its quant_type
            scales = ", double-quantized scales" if self.double_quant else ""
            return f"4-bit {self.quant_type.upper()} frozen weights{scales}"
        if self.trainable_weight:
            return "trainable weights, int8 matmul (LLM.int8())"
        return "8-bit frozen weights (LLM.int8())"


MODES: dict[str, QuantMode] = {
    "nf4": QuantMode("nf4", 4, "nf4"),
    "nf4-dq": QuantMode("nf4-dq", 4, "nf4", double_quant=True),
    "fp4": QuantMode("fp4", 4, "fp4"),
    "fp4-dq": QuantMode("fp4-dq", 4, "fp4", double_quant=True),
    "int8": QuantMode("int8", 8),
    "int8-training": QuantMode("int8-training", 0, trainable_weight=True),
}


def compute_dtype(options: BitsandbytesKwargs, precision_compute_dtype: torch.dtype) -> torch.dtype:
    """The dtype the quantized layers compute in: the handler's, else float16 for the int8 modes
    (the only one they take), else the precision's (fp32 for 'no', bf16 for 'bf16', ...)."""
    if options.dtype is not None:
        return options.dtype
    return torch.float16 if options.is_int8 else precision_compute_dtype
