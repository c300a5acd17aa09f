"""bitsandbytes-quantized models: the estimate (training_bytes(..., quantization=mode), from a meta model) equals
what one process holds after real steps, byte for byte, the quant state counted with the parameters; the bytes
per weight at scale are QLoRA's; what accel refuses is refused. DDP and FSDP2: test_ranks.py."""

from __future__ import annotations

import pytest
import torch
from ranks_script import ADAPTERS, quant_model, train
from torch import nn

from accel import Accelerator, BitsandbytesKwargs
from accel.estimate.training import training_bytes

CASES = [("nf4", "no", ""), ("nf4-dq", "bf16", "peft"), ("fp4", "bf16-true", "hand"), ("fp4-dq", "no", ""),
         ("int8", "no", "hand"), ("int8-training", "bf16-true", "")]


@pytest.mark.parametrize(("mode", "precision", "adapters"), CASES)
def test_one_process_holds_what_was_estimated(mode: str, precision: str, adapters: str) -> None:
    ignore = ADAPTERS if adapters == "hand" else ()
    [estimate] = training_bytes(quant_model(adapters, "meta"), precision, quantization=mode, ignore_modules=ignore)
    dtype = torch.float16 if mode.startswith("int8") else torch.float32  # the compute dtype: held bytes do not change
    # bitsandbytes torch.compiles its CPU dequantize kernel per shape (15 s here); what it makes is a temporary
    with torch._dynamo.config.patch(disable=True):
        accelerator = Accelerator(cpu=True, mixed_precision=precision,
                                  kwarg_handlers=[BitsandbytesKwargs(mode=mode, dtype=dtype, ignore_modules=ignore)])
        _, held = train(accelerator, quant_model(adapters), 32)
    assert held == [estimate.parameters, estimate.gradients, estimate.optimizer] and estimate.buffers == 0
    [unquantized] = training_bytes(quant_model(adapters, "meta"), precision)
    assert estimate.parameters != unquantized.parameters


def test_bytes_per_weight_at_scale() -> None:
    """QLoRA's paper: NF4 holds 4 bits a weight plus a float32 absmax per 64 (0.5 bits), double quantization
    brings that to 8/64 + 32/(64 x 256) = 0.127 bits; bitsandbytes adds its codes (16 and 256 float32 values) and
    the offset per layer. int8: a byte a weight and a float32 scale per row."""
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4096, 4096, bias=False))
    n = 4096 * 4096
    held = {mode: training_bytes(model, quantization=mode)[0] for mode in ("nf4", "nf4-dq", "int8")}
    assert held["nf4"].parameters == n // 2 + n // 64 * 4 + 16 * 4
    assert held["nf4-dq"].parameters == n // 2 + n // 64 + 4 + n // 64 // 256 * 4 + 256 * 4 + 16 * 4
    assert round(8 * held["nf4-dq"].parameters / n, 3) == 4.127
    assert held["int8"].parameters == n + 4096 * 4
    assert all(ranks.gradients == ranks.optimizer == 0 for ranks in held.values())  # frozen
    fsdp = training_bytes(model, layout="fsdp", processes=3, quantization="nf4-dq")  # packed rows padded to 3 chunks
    assert fsdp[0].parameters == fsdp[2].parameters == -(-n // 2 // 3) + held["nf4-dq"].parameters - n // 2 + 256 * 4


def test_refused_as_accel_refuses() -> None:
    model = quant_model("", "meta")
    from accel.fsdp import FullyShardedDataParallelPlugin

    with pytest.raises(ValueError, match="FSDP2 shards only"):
        Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2),
                    kwarg_handlers=[BitsandbytesKwargs(mode="int8")])
    with pytest.raises(ValueError, match="accel shards only the 4-bit modes"):
        training_bytes(model, layout="fsdp", processes=2, quantization="int8")
    with pytest.raises(ValueError, match="mixed_precision='fp8' cannot run"):
        Accelerator(cpu=True, mixed_precision="fp8", kwarg_handlers=[BitsandbytesKwargs(mode="nf4")])
    with pytest.raises(ValueError, match="refuses bitsandbytes with FP8"):
        training_bytes(model, "fp8-native", quantization="nf4")
    with pytest.raises(ValueError, match="quantization='int4'"):
        training_bytes(model, quantization="int4")
    with pytest.raises(ValueError, match="no nn.Linear layer accel would quantize"):  # as accel's Quantizer
        training_bytes(model, quantization="nf4", ignore_modules=("*",))
