"""4-bit bitsandbytes layers under FSDP2 (QLoRA over several processes): what fully_shard needs from them.

fully_shard splits each frozen packed weight (uint8, or the float `bnb_4bit_quant_storage` transformers
can use) over the processes like any other parameter and all-gathers it for its layer's forward; the
quant state (block scales, a few bytes per 64 weights) stays whole on every process, on the layer.

Two things are done here, neither imports bitsandbytes (no bitsandbytes layer exists unless it is
imported already):
- `check_quant_storage`, before sharding: a 4-bit weight stored in a floating dtype must not be cast by
  the MixedPrecisionPolicy's `param_dtype` (the cast would turn packed bytes into other numbers);
- `address_quant_states`, after sharding: torch's distributed state_dict reaches a state_dict key such
  as `layer.weight.absmax` by `getattr(layer.weight, "absmax")`; bitsandbytes' Params4bit answers that,
  the sharded DTensor that replaced it does not, so the quant state is made reachable on it again.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

QUANT_STATE_FIELDS = ("absmax", "quant_map", "nested_absmax", "nested_quant_map")
"""The first names of a 4-bit weight's state_dict entries beside `weight` (`weight.absmax`, ...);
`weight.quant_state.bitsandbytes__nf4` is reached through the QuantState itself."""


_HOOKED: weakref.WeakSet[nn.Module] = weakref.WeakSet()
"""The layers accel did not quantize that already have the load hook (sharded twice: hooked once)."""


def four_bit_layers(model: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    """(name, layer) of every bitsandbytes 4-bit Linear in `model` (accel's, transformers', a user's)."""
    bnb = sys.modules.get("bitsandbytes")
    if bnb is None:
        return
    for name, module in model.named_modules():
        if isinstance(module, bnb.nn.Linear4bit):
            yield name, module


def quant_state_tensors(model: nn.Module) -> list[torch.Tensor]:
    """The tensors bitsandbytes keeps beside `model`'s quantized weights, outside any parameter: each 4-bit
    layer's QuantState (block scales, code table, double quantization's second level, and what
    `address_quant_state` hangs on a sharded weight), each 8-bit layer's row scales and int8 copy. What a rank
    holds for them (accel.estimate.measure counts them with the parameters); none without bitsandbytes."""
    bnb = sys.modules.get("bitsandbytes")
    if bnb is None:
        return []
    found: list[object] = []
    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            states = {id(s): s for s in (getattr(module.weight, "quant_state", None), module.quant_state) if s is not None}
            for state in states.values():
                found += [state.absmax, state.code, state.offset]
                if state.state2 is not None:
                    found += [state.state2.absmax, state.state2.code]
            found += [getattr(module.weight, name, None) for name in QUANT_STATE_FIELDS]
        elif isinstance(module, bnb.nn.Linear8bitLt):
            found += [getattr(module.weight, "SCB", None), module.state.SCB, module.state.CB]
    return [t for t in found if isinstance(t, torch.Tensor)]


def check_quant_storage(model: nn.Module, param_dtype: torch.dtype | None) -> None:
    """Raise ValueError when a 4-bit weight stored in a floating dtype would be cast to `param_dtype`.

    Example: a model loaded with transformers' `BitsAndBytesConfig(load_in_4bit=True,
    bnb_4bit_quant_storage=torch.float32)` under `mixed_precision="bf16"` is refused here; uint8 storage
    (the default) or storage equal to the compute dtype runs.
    """
    if param_dtype is None:
        return
    for name, layer in four_bit_layers(model):
        storage = layer.weight.dtype
        if storage.is_floating_point and storage != param_dtype:
            raise ValueError(
                f"prepare: {name}.weight holds 4-bit packed values in {storage} (bnb_4bit_quant_storage), and FSDP's "
                f"MixedPrecisionPolicy(param_dtype={param_dtype}) would cast them, destroying them. Load the model "
                f"with bnb_4bit_quant_storage=torch.uint8 (the default) or ={param_dtype}, or train without "
                "mixed precision."
            )


def address_quant_states(model: nn.Module) -> int:
    """Make every sharded 4-bit weight of `model` answer `absmax`, `quant_map`, ... and `quant_state`
    (so that checkpoints of the sharded model can be taken and loaded); return how many it did.

    Layers accel did not quantize (transformers', a user's) also get a load hook that takes the saved
    quant state (bitsandbytes' own loading leaves those entries unexpected); accel's load it themselves.
    """
    layers = [layer for _, layer in four_bit_layers(model)]
    if not layers:  # also: bitsandbytes not imported, which accel.quantization.layers would import
        return 0
    from accel.quantization.layers import QuantLinear4bit

    count = 0
    for layer in layers:
        if not isinstance(layer.weight, torch.nn.Parameter) or type(layer.weight).__name__ == "Params4bit":
            continue
        address_quant_state(layer)
        if not isinstance(layer, QuantLinear4bit) and layer not in _HOOKED:
            layer.register_load_state_dict_pre_hook(_load_quant_state)
            _HOOKED.add(layer)
        count += 1
    return count


def _load_quant_state(module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """Load hook of a sharded bitsandbytes 4-bit layer: take the saved quant state out of `state_dict`
    and make it the layer's; the packed shard itself is copied into the sharded weight as usual."""
    import bitsandbytes.functional as bnb_functional

    key = prefix + "weight"
    stats = {k[len(key) + 1:]: state_dict.pop(k) for k in [k for k in state_dict if k.startswith(key + ".")]}
    if not stats:
        return
    layer: Any = module  # a bitsandbytes Linear4bit
    layer.quant_state = bnb_functional.QuantState.from_dict(stats, device=layer.weight.device)
    address_quant_state(layer)


def address_quant_state(layer: nn.Module) -> None:
    """Put `layer`'s quant state and its tensors on its (sharded) weight under the names the state_dict uses."""
    state: Any = layer.quant_state  # a bitsandbytes QuantState
    weight: Any = layer.weight
    weight.quant_state = state
    packed = state.as_dict(packed=True)
    for field in QUANT_STATE_FIELDS:
        if field in packed:
            setattr(weight, field, packed[field])
