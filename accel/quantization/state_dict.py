"""A quantized model's weights as a state_dict: as stored (quantized, with what is needed to load
them again) or dequantized (plain floating-point weights that an unquantized model loads).

Needs bitsandbytes (imports accel.quantization.layers).
"""

from __future__ import annotations

import torch
from torch import nn

from accel.quantization.layers import QUANTIZED_LAYERS


def quantized_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """`model.state_dict()`: each quantized weight with its quant state next to it.

    4-bit layers: `<layer>.weight` (packed uint8) and `<layer>.weight.absmax`, `.quant_map`,
    (`.nested_absmax`, `.nested_quant_map` with double quantization) and
    `.quant_state.bitsandbytes__nf4|fp4` (bitsandbytes' own layout, which transformers reads too);
    int8 layers: `<layer>.weight` (int8), `<layer>.SCB` (row scales) and `<layer>.weight_format`.
    `model.load_state_dict` of a model quantized the same way restores them exactly.
    """
    return model.state_dict()


def dequantized_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's state_dict with every quantized weight turned back into a floating-point tensor
    under its own name and nothing else of its quant state: what the unquantized model loads."""
    state = model.state_dict()
    for name, module in model.named_modules(remove_duplicate=False):
        if not isinstance(module, QUANTIZED_LAYERS):
            continue
        prefix = f"{name}." if name else ""
        for key in [k for k in state if _belongs_to_weight(k, prefix)]:
            del state[key]
        state[f"{prefix}weight"] = module.dequantized_weight().detach()
    return state


def _belongs_to_weight(key: str, prefix: str) -> bool:
    if not key.startswith(prefix):
        return False
    rest = key[len(prefix):]
    return rest == "weight" or rest.startswith("weight.") or rest in ("SCB", "weight_format")
