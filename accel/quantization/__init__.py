"""Quantized training through bitsandbytes: `BitsandbytesKwargs` turns a prepared model's nn.Linear
layers into 4-bit or 8-bit ones (Lightning's modes), for QLoRA and memory-lean fine-tuning.

Importing this package does not import bitsandbytes; `create_quantizer` does, when it is asked for.
"""

from accel.quantization.capability import capability_line, mode_reason, supported_modes
from accel.quantization.modes import MODES, QuantMode
from accel.quantization.plan import QuantizationReport
from accel.quantization.quantizer import Quantizer, create_quantizer

__all__ = [
    "MODES",
    "QuantMode",
    "QuantizationReport",
    "Quantizer",
    "capability_line",
    "create_quantizer",
    "mode_reason",
    "supported_modes",
]
