"""Quantization numbers: bytes per parameter of the quantized Linear layers in each bitsandbytes mode
(against bf16 and fp32), and the step time of QLoRA (nf4-dq + LoRA) against full fine-tuning.

    python benchmarks/quantization.py                 # ~1 minute on 2 CPU cores
    python benchmarks/quantization.py --size 2048 --steps 20

Bytes are measured from the state_dict a quantized layer saves (weight plus its whole quant state:
block scales, nested scales, code book, packed metadata; int8: row scales), so they are what a
checkpoint and the device memory hold. Step times are medians over --steps steps of the example GPT
(examples/gpt.py); they are machine-dependent and never asserted by tests.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

from gpt import GPT, GPTConfig  # noqa: E402

from accel.kwargs_handlers import BitsandbytesKwargs, Handlers  # noqa: E402
from accel.kwargs_handlers.bitsandbytes import BNB_MODES  # noqa: E402
from accel.quantization import create_quantizer  # noqa: E402


class _Precision:
    name = "no"
    compute_dtype = torch.float32


def quantizer(mode: str) -> object:
    handlers = Handlers({BitsandbytesKwargs: BitsandbytesKwargs(mode=mode)})
    return create_quantizer(handlers, _Precision(), torch.device("cpu"))


def state_bytes(module: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in module.state_dict().values())


def bytes_per_param(size: int) -> dict[str, float]:
    """Bytes per weight of a size x size Linear without bias, per mode; bf16 and fp32 for reference."""
    params = size * size
    linear = nn.Sequential(nn.Linear(size, size, bias=False))
    result = {"fp32": state_bytes(linear) / params, "bf16": state_bytes(linear.to(torch.bfloat16)) / params}
    for mode in BNB_MODES:
        model = nn.Sequential(nn.Linear(size, size, bias=False))
        quantizer(mode).convert(model)
        result[mode] = state_bytes(model) / params
    return result


def step_time(qlora: bool, steps: int, batch: int) -> float:
    """Median seconds of one training step of the example GPT (default config)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig())
    if qlora:
        import peft

        config = peft.LoraConfig(r=8, lora_alpha=16, target_modules=["qkv", "proj", "fc"], lora_dropout=0.0)
        model = peft.get_peft_model(model, config)
        quantizer("nf4-dq").convert(model)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    x = torch.randint(0, 96, (batch, 64))
    times = []
    for _ in range(steps + 2):
        start = time.perf_counter()
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), x.view(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    return statistics.median(times[2:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1024, help="Linear layer size for the bytes per parameter")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch_size", type=int, default=16)
    args = parser.parse_args(argv)
    print(f"bytes per parameter of a {args.size}x{args.size} Linear (weight + quant state, as saved):")
    for name, value in bytes_per_param(args.size).items():
        print(f"  {name:<14} {value:6.3f}")
    full = step_time(False, args.steps, args.batch_size)
    qlora = step_time(True, args.steps, args.batch_size)
    print(f"example GPT step time on {torch.get_num_threads()} thread(s), batch {args.batch_size} x 64:")
    print(f"  full fine-tuning (fp32 AdamW)   {full * 1e3:7.1f} ms")
    print(f"  QLoRA (nf4-dq + LoRA r=8, fp32) {qlora * 1e3:7.1f} ms  ({qlora / full:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
