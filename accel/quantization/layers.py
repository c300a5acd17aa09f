"""bitsandbytes' quantized Linear layers as accel runs them. Imports bitsandbytes: import this module
only after `capability.import_bitsandbytes()` succeeded.

Subclasses of `bnb.nn.Linear4bit` / `bnb.nn.Linear8bitLt` (so `isinstance` checks by peft and
transformers hold) that change what would otherwise be wrong in a training loop:
- the compute dtype is the one asked for, under autocast too (autocast is paused inside the layer);
  inputs are cast to it and outputs back to the input's dtype;
- the bias is cast for the matmul, never rewritten in place (bitsandbytes turns it into the input's
  dtype on the first forward, which would take the fp32 master bias away from the optimizer);
- `load_state_dict` restores a saved quantized weight exactly (its quant state too), and quantizes a
  floating-point weight (a full-precision checkpoint) on the way in;
- int8-training re-quantizes its weight whenever it changed (bitsandbytes reuses a stale int8 copy
  while a gradient exists, and in eval mode), takes inputs of any rank, and on CPU always runs
  bitsandbytes' CPU path (its LLM.int8() eval kernel for trainable weights is CUDA-only);
- the 4-bit layout never changes in eval mode (no CPU re-packing), so state_dicts are stable;
- the packed quant-state blob of a 4-bit state_dict is padded with JSON whitespace to a fixed
  length, so that its shape does not depend on the weights' values (checkpoints compare shapes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, cast

import bitsandbytes as bnb
import bitsandbytes.functional as bnb_functional
import torch
from torch import nn
from torch.distributed.tensor import DTensor

from accel.quantization.modes import QuantMode

INT8_THRESHOLD = 6.0
"""LLM.int8()'s outlier threshold, as Lightning sets it for both int8 modes."""
BLOB_BYTES = 512
"""Fixed length of the padded quant-state blob in a 4-bit state_dict."""
_BLOB_MARK = "quant_state.bitsandbytes__"


@contextlib.contextmanager
def _compute(device_type: str) -> Iterator[None]:
    """Pause autocast for the quantized matmul, so that it runs in the layer's compute dtype."""
    if torch.is_autocast_enabled(device_type):
        with torch.autocast(device_type, enabled=False):
            yield
    else:
        yield


class QuantLinear4bit(bnb.nn.Linear4bit):
    """nf4 / fp4 weights (optionally with double-quantized scales), frozen; bias and input train."""

    weight: bnb.nn.Params4bit  # Linear4bit keeps its weight as Params4bit (nn.Linear declares a Tensor)

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, *, mode: QuantMode,
        compute_dtype: torch.dtype, device: Any = None,
    ) -> None:
        super().__init__(
            in_features, out_features, bias=bias, compute_dtype=compute_dtype,
            compress_statistics=mode.double_quant, quant_type=mode.quant_type, device=device,
        )
        self.quant_mode = mode.name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The layer's own quant state: under FSDP2 the weight is the plain tensor all-gathered for this
        # forward, which carries none (bitsandbytes' fix-up would re-register a new Params4bit each time).
        weight = self.weight
        state = weight.quant_state if isinstance(weight, bnb.nn.Params4bit) else self.quant_state
        with _compute(x.device.type):
            bias = None if self.bias is None else self.bias.to(self.compute_dtype)
            out = bnb.matmul_4bit(x.to(self.compute_dtype), weight, bias=bias, quant_state=state)
        return out.to(x.dtype)

    def quantize_weight(self, weight: torch.Tensor) -> None:
        """Store `weight` (out_features x in_features, floating point) quantized, on its device."""
        _check_shape(self, weight)
        device = self.weight.device if self.weight.device.type != "meta" else weight.device
        param = bnb.nn.Params4bit(
            weight.detach(), requires_grad=False, blocksize=self.weight.blocksize,
            compress_statistics=self.weight.compress_statistics, quant_type=self.weight.quant_type,
            quant_storage=self.weight.quant_storage, module=self,
        )
        self.weight = param._quantize(device)

    def dequantized_weight(self) -> torch.Tensor:
        """The weight in the dtype it was quantized from (float32 for an fp32 model)."""
        return bnb_functional.dequantize_4bit(self.weight.data, self.weight.quant_state)

    def _save_to_state_dict(self, destination: dict[str, Any], prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        for key in [k for k in destination if k.startswith(prefix + "weight." + _BLOB_MARK)]:
            destination[key] = _padded(destination[key])

    def _load_from_state_dict(self, state_dict: Any, prefix: str, *args: Any) -> None:
        key = prefix + "weight"
        stats = {k[len(key) + 1:]: v for k, v in state_dict.items() if k.startswith(key + ".")}
        rest = {k: v for k, v in state_dict.items() if k.startswith(prefix) and k != key and not k.startswith(key + ".")}
        super()._load_from_state_dict(rest, prefix, *args)
        missing = args[2]
        if key in missing:
            missing.remove(key)
        if key not in state_dict:
            missing.append(key)
        elif isinstance(self.weight, DTensor):
            self._load_shard(state_dict[key], stats, key)
        elif state_dict[key].is_floating_point():
            self.quantize_weight(state_dict[key])
        else:
            self._load_quantized(state_dict[key], stats, key)

    def _load_shard(self, data: torch.Tensor, stats: dict[str, torch.Tensor], key: str) -> None:
        """Under FSDP2: copy the saved packed shard into the sharded weight in place (FSDP owns that
        Parameter) and take the saved quant state, which every process holds whole."""
        if data.is_floating_point() or not stats:
            raise RuntimeError(
                f"{key}: a model sharded by FSDP loads quantized weights with their quant state (the checkpoints "
                "save_state writes); it got a floating-point weight. Load full-precision weights before prepare()."
            )
        state = bnb_functional.QuantState.from_dict(dict(stats), device=self.weight.device)
        self._check_mode(state, key)
        with torch.no_grad():
            self.weight.copy_(data)
        from accel.quantization.sharding import address_quant_state

        self.quant_state = state
        address_quant_state(self)

    def _check_mode(self, state: Any, key: str) -> None:
        if (state.quant_type, state.nested) != (self.weight.quant_type, self.weight.compress_statistics):
            saved = state.quant_type + ("-dq" if state.nested else "")
            raise RuntimeError(
                f"{key} was saved in mode {saved!r}, but this layer runs {self.quant_mode!r}; load it with "
                f"BitsandbytesKwargs(mode={saved!r}), or load dequantized weights (get_state_dict(..., dequantize=True))."
            )

    def _load_quantized(self, data: torch.Tensor, stats: dict[str, torch.Tensor], key: str) -> None:
        if not stats:
            raise RuntimeError(
                f"{key}: the saved weight is quantized ({data.dtype}) but its quant state ({key}.absmax, ...) is "
                "missing; save the model with its whole state_dict (accelerator.save_model does)."
            )
        state = bnb_functional.QuantState.from_dict(dict(stats), device=data.device)
        self._check_mode(state, key)
        device = self.weight.device if self.weight.device.type != "meta" else data.device
        self.weight = bnb.nn.Params4bit.from_prequantized(data, dict(stats), device=device, module=self)


class QuantLinear8bit(bnb.nn.Linear8bitLt):
    """int8 (frozen int8 weights) or int8-training (trainable weights, int8 matmul), computing in float16."""

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, *, mode: QuantMode,
        compute_dtype: torch.dtype, device: Any = None,
    ) -> None:
        super().__init__(
            in_features, out_features, bias=bias, has_fp16_weights=mode.trainable_weight,
            threshold=INT8_THRESHOLD, device=device,
        )
        self.quant_mode = mode.name
        self.compute_dtype = compute_dtype
        self._quantized_version = -1
        if mode.trainable_weight:  # a plain Parameter: it trains like any other weight
            self.weight = nn.Parameter(self.weight.data)

    @property
    def trainable(self) -> bool:
        return bool(self.state.has_fp16_weights)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        state = self.state
        state.is_training = self.training or (self.trainable and x.device.type in ("cpu", "xpu"))
        if getattr(self.weight, "CB", None) is not None:
            self.init_8bit_state()
        if self.trainable and self._quantized_version != self.weight._version:
            state.CB = state.SCB = None  # the weight changed: quantize it again
            self._quantized_version = self.weight._version
        with _compute(x.device.type):
            bias = None if self.bias is None else self.bias.to(self.compute_dtype)
            flat = x.reshape(-1, x.shape[-1]).to(self.compute_dtype)
            out = bnb.matmul(flat, self.weight, bias=bias, state=state)
        if not self.trainable and state.CB is not None:
            self.weight.data = state.CB
        return out.reshape(*x.shape[:-1], out.shape[-1]).to(x.dtype)

    def quantize_weight(self, weight: torch.Tensor) -> None:
        """Store `weight` (out_features x in_features): as int8 (int8), or as it is (int8-training)."""
        _check_shape(self, weight)
        device = self.weight.device if self.weight.device.type != "meta" else weight.device
        self.state.CB = self.state.SCB = None
        self._quantized_version = -1
        if self.trainable:
            self.weight = nn.Parameter(weight.detach().to(device), requires_grad=self.weight.requires_grad)
            return
        param = bnb.nn.Int8Params(weight.detach(), requires_grad=False, has_fp16_weights=False)
        self.weight = param._quantize(device)

    def dequantized_weight(self) -> torch.Tensor:
        """The weight in float32 (int8), or the weight itself (int8-training)."""
        if self.trainable:
            return self.weight.detach()
        # Not trainable: the weight is the Int8Params that _quantize made.
        scb = self.state.SCB if self.state.SCB is not None else cast(bnb.nn.Int8Params, self.weight).SCB
        return self.weight.data.float() * (scb.float().unsqueeze(1) / 127.0)

    def _load_from_state_dict(self, state_dict: Any, prefix: str, *args: Any) -> None:
        key, scb_key = prefix + "weight", prefix + "SCB"
        if self.trainable or key not in state_dict:
            super()._load_from_state_dict(state_dict, prefix, *args)
            self._quantized_version = -1
            return
        own = (key, scb_key, prefix + "weight_format")
        rest = {k: v for k, v in state_dict.items() if k.startswith(prefix) and k not in own}
        super()._load_from_state_dict(rest, prefix, *args)
        missing = args[2]
        if key in missing:
            missing.remove(key)
        saved = state_dict[key]
        if saved.is_floating_point():
            self.quantize_weight(saved)
        elif scb_key not in state_dict:
            raise RuntimeError(f"{key}: the saved weight is int8 but its scales ({scb_key}) are missing.")
        else:
            _check_shape(self, saved)
            device = self.weight.device if self.weight.device.type != "meta" else saved.device
            data, scb = saved.to(device), state_dict[scb_key].to(device)
            self.weight = bnb.nn.Int8Params(data, requires_grad=False, has_fp16_weights=False, CB=data, SCB=scb)
            self.state.CB = self.state.SCB = None


QUANTIZED_LAYERS = (QuantLinear4bit, QuantLinear8bit)


def is_quantized_layer(module: nn.Module) -> bool:
    """A bitsandbytes Linear layer (accel's, or one the user built with bitsandbytes directly)."""
    return isinstance(module, (bnb.nn.Linear4bit, bnb.nn.Linear8bitLt))


def layer_class(mode: QuantMode) -> type[QuantLinear4bit] | type[QuantLinear8bit]:
    """The layer class of `mode`."""
    return QuantLinear4bit if mode.is_4bit else QuantLinear8bit


def _check_shape(layer: nn.Linear, weight: torch.Tensor) -> None:
    expected = (layer.out_features, layer.in_features)
    if tuple(weight.shape) != expected:
        raise RuntimeError(f"cannot load a weight of shape {tuple(weight.shape)} into a layer of shape {expected}.")


def _padded(blob: torch.Tensor) -> torch.Tensor:
    """`blob` (UTF-8 JSON bytes) padded with spaces to BLOB_BYTES: json.loads ignores trailing whitespace."""
    if blob.numel() >= BLOB_BYTES:
        return blob
    pad = torch.full((BLOB_BYTES - blob.numel(),), ord(" "), dtype=blob.dtype, device=blob.device)
    return torch.cat([blob, pad])
