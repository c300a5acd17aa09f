"""accel.quantization.sharding: what FSDP2 needs from 4-bit layers, checked on real bitsandbytes layers
(the sharded runs themselves are in tests/fsdp/test_qlora_fsdp.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

bnb = pytest.importorskip("bitsandbytes")

from accel.quantization.sharding import check_quant_storage, four_bit_layers  # noqa: E402


def _model(storage: torch.dtype) -> nn.Module:
    layer = bnb.nn.Linear4bit(64, 64, compute_dtype=torch.float32, quant_storage=storage)
    layer.weight = layer.weight._quantize("cpu")  # as transformers' from_pretrained leaves it
    return nn.Sequential(nn.Linear(64, 64), layer)


def test_four_bit_layers_finds_bitsandbytes_layers_only() -> None:
    assert [name for name, _ in four_bit_layers(_model(torch.uint8))] == ["1"]


def test_float_storage_that_mixed_precision_would_cast_is_refused_naming_the_setting() -> None:
    model = _model(torch.float32)
    assert model[1].weight.dtype == torch.float32 and model[1].weight.shape == (512, 1)  # packed, in float32
    with pytest.raises(ValueError, match=r"1\.weight holds 4-bit packed values in torch\.float32 \(bnb_4bit_quant_storage\).*"
                       r"bnb_4bit_quant_storage=torch\.uint8"):
        check_quant_storage(model, torch.bfloat16)


@pytest.mark.parametrize(("storage", "param_dtype"), [(torch.uint8, torch.bfloat16), (torch.float32, torch.float32),
                                                      (torch.float32, None)])
def test_storage_that_is_not_cast_is_accepted(storage: torch.dtype, param_dtype: torch.dtype | None) -> None:
    check_quant_storage(_model(storage), param_dtype)


def test_a_model_without_bitsandbytes_layers_needs_no_bitsandbytes() -> None:
    """shard_model runs these for every FSDP model: without 4-bit layers they must not import bitsandbytes."""
    import subprocess
    import sys

    code = ("import sys, torch; from accel.quantization.sharding import address_quant_states, check_quant_storage; "
            "m = torch.nn.Linear(2, 2); assert address_quant_states(m) == 0; check_quant_storage(m, torch.bfloat16); "
            "assert 'bitsandbytes' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
