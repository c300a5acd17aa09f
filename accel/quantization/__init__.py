"""Quantized training through bitsandbytes: `BitsandbytesKwargs` turns a prepared model's nn.Linear
layers into 4-bit or 8-bit ones (Lightning's modes), for QLoRA and memory-lean fine-tuning.

Importing this package does not import bitsandbytes; `create_quantizer` does, when it is asked for.

The modules, by job:

* the Accelerator's side: quantizer.py (`Quantizer`, `create_quantizer`: the mode checked at
  construction, models converted, their weights given, a stale optimizer refused);
* the modes: modes.py (the six modes and what each stores; no bitsandbytes), capability.py (which
  modes run on this machine, tried on the device, and why not);
* converting: plan.py (which Linear layers are quantized, and the report), convert.py (layers
  swapped in place, or models built quantized), layers.py (bitsandbytes' 4-bit and 8-bit Linear
  layers as accel runs them; imports bitsandbytes);
* around training: state_dict.py (a quantized model's weights, as stored or dequantized),
  sharding.py (4-bit layers under FSDP2: QLoRA over several processes).
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
