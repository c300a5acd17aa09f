"""A quantized model's weights as a state_dict: as stored (quantized, with what is needed to load
them again) or dequantized (plain floating-point weights that an unquantized model loads).

Needs bitsandbytes (imports accel.quantization.layers).
"""

from __future__ import annotations

import bitsandbytes.functional as bnb_functional
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


def dequantize_gathered(state: dict[str, torch.Tensor], model: nn.Module) -> dict[str, torch.Tensor]:
    """`state`, the full state_dict gathered from a model sharded by FSDP (empty on processes other than
    the main one), with each 4-bit weight dequantized from its gathered packed values and quant state,
    in place. The int8 modes do not run under FSDP, so only 4-bit layers are met here."""
    for name, module in model.named_modules(remove_duplicate=False):
        key = f"{name}.weight" if name else "weight"
        if not isinstance(module, QUANTIZED_LAYERS) or key not in state:
            continue
        stats = {k[len(key) + 1:]: state.pop(k) for k in [k for k in state if k.startswith(key + ".")]}
        quant_state = bnb_functional.QuantState.from_dict(stats, device=state[key].device)
        state[key] = bnb_functional.dequantize_4bit(state[key], quant_state)
    return state
