"""Launched by test_ranks.py on 2 and on 4 processes: for each case (native FP8 O1/O2 under DDP, bitsandbytes
4-bit under DDP and FSDP2), train two steps, backward once more (gradients held, as in the middle of a step) and
report what each rank holds beside the estimate. Also the models and the quant-state measure test_quantized.py uses.

The FP8 cases run the eager FP8 kernels, as on a GPU (the fused CPU kernels, which the one-process tests of
test_training.py run, take 20 s to compile per process and hold the same tensors: measured), and bitsandbytes runs
its CPU dequantize kernel uncompiled (torch.compile makes it per shape, 15 s; it makes a temporary, nothing held).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch
from torch import nn

from accel.estimate.measure import held_bytes
from accel.estimate.training import RankBytes, training_bytes

if TYPE_CHECKING:
    from accel import Accelerator


def fp8_model() -> nn.Module:
    """Two layers native FP8 converts (dimensions multiples of 16), one it does not, a frozen one."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 48), nn.ReLU(), nn.Linear(48, 16), nn.Linear(16, 16), nn.Linear(16, 5))
    model[3].requires_grad_(False)
    return model


def tied_fp8_model() -> nn.Module:
    """Two layers native FP8 would convert sharing a weight (O1/O2 keep them in float32), and one it converts."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32), nn.Linear(32, 16))
    model[2].weight = model[0].weight
    return model


class Net(nn.Module):
    """Linear layers whose sizes are neither even nor multiples of 64 (a last short block), a LayerNorm, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(32, 67)
        self.fc2 = nn.Linear(67, 33)
        self.norm = nn.LayerNorm(33)
        self.head = nn.Linear(33, 7, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.fc2(nn.functional.gelu(self.fc1(x)))))


class Adapted(nn.Module):
    """A LoRA-style adapter by hand: a Linear (quantized, frozen) plus a trainable low-rank path, kept out of
    quantization by BitsandbytesKwargs(ignore_modules=ADAPTERS) (peft's adapters are kept out by accel's plan)."""

    def __init__(self, base: nn.Linear, rank: int = 4) -> None:
        super().__init__()
        self.base = base
        self.lora_a = nn.Linear(base.in_features, rank, bias=False)
        self.lora_b = nn.Linear(rank, base.out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.lora_b(self.lora_a(x))


ADAPTERS = ("*.lora_*",)


def quant_model(adapters: str = "", device: str | None = None) -> nn.Module:
    """`Net` (on `device`); "peft": peft's LoRA adapters on fc1 and fc2 (QLoRA: only the adapters train),
    "hand": `Adapted` ones with the rest frozen; "": as it is (the biases and the LayerNorm train)."""
    torch.manual_seed(0)
    with torch.device(device or "cpu"):
        model = Net()
        if adapters == "hand":
            model.requires_grad_(False)
            for name in ("fc1", "fc2"):
                setattr(model, name, Adapted(getattr(model, name)))
    if adapters != "peft":
        return model
    import peft

    return peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["fc1", "fc2"], lora_dropout=0.0))


def held(model: nn.Module, optimizers: Iterable[torch.optim.Optimizer], accelerator: Accelerator) -> list[int]:
    """[parameters with the quant state, gradients, optimizer state] this rank holds, each storage once."""
    counted = held_bytes(model, list(optimizers), accelerator)
    return [counted.parameters, counted.gradients, counted.optimizer]


def train(accelerator: Accelerator, model: nn.Module, inputs: int, optimizer_name: str = "adamw") -> tuple[nn.Module, list[int]]:
    """Prepare (the model first: quantization freezes its Linear weights), two steps, one more backward; the
    prepared model and what this rank holds."""
    model = accelerator.prepare(model)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = accelerator.prepare(torch.optim.AdamW(trainable, lr=1e-3) if optimizer_name == "adamw"
                                    else torch.optim.SGD(trainable, lr=1e-3, momentum=0.9))
    generator = torch.Generator().manual_seed(1)
    for step in range(3):
        accelerator.backward(model(torch.randn(4, inputs, generator=generator)).float().sum())
        if step < 2:
            optimizer.step()
    return model, held(model, [optimizer], accelerator)


def buckets(model: nn.Module) -> int:
    """Bytes of DDP's gradient buckets (0 without DDP: nothing of the model trains through it)."""
    if not isinstance(model, nn.parallel.DistributedDataParallel):
        return 0
    sizes = model._get_ddp_logging_data().get("bucket_sizes", "")
    return sum(int(size) for size in str(sizes).split(",") if size.strip())


def numbers(estimate: RankBytes) -> list[int]:
    """[parameters, gradients, optimizer, buffers] of one rank's estimate."""
    return [estimate.parameters, estimate.gradients, estimate.optimizer, estimate.buffers]


def main(cases: list[str]) -> None:
    """Run the FP8 cases ("fp8") and the bitsandbytes ones ("quant"); report every case's numbers."""
    from launching import report

    import accel.backends.native_fp8.fused as fused
    from accel import Accelerator, BitsandbytesKwargs, FP8RecipeKwargs
    from accel.fsdp import FullyShardedDataParallelPlugin

    fused._probe = lambda: "eager kernels, as on a GPU"  # type: ignore[assignment]  # see the module docstring
    results = {}
    fp8_cases = (("O1", "adamw", fp8_model), ("O2", "adamw", fp8_model), ("O1", "sgd-momentum", fp8_model),
                 ("O2", "adamw", tied_fp8_model))
    for level, optimizer_name, build in fp8_cases if "fp8" in cases else ():
        recipe = FP8RecipeKwargs(backend="native", optimization_level=level)
        accelerator = Accelerator(cpu=True, mixed_precision="fp8", kwarg_handlers=[recipe])
        estimate = training_bytes(build(), f"fp8-native-{level}", "ddp", accelerator.num_processes, optimizer_name,
                                  device="cpu")[accelerator.process_index]
        model, measured = train(accelerator, build(), 32, optimizer_name)
        tied = "-tied" if build is tied_fp8_model else ""
        results[f"fp8-{level}-{optimizer_name}{tied}"] = (measured, numbers(estimate), buckets(model))
    torch._dynamo.config.disable = True  # see the module docstring
    for mode, adapters, layout, precision in (("nf4-dq", "hand", "ddp", "bf16"), ("nf4", "", "ddp", "no"),
                                              ("nf4-dq", "", "fsdp", "no")) if "quant" in cases else ():
        plugin = FullyShardedDataParallelPlugin(fsdp_version=2) if layout == "fsdp" else None
        ignore = ADAPTERS if adapters == "hand" else ()
        handler = BitsandbytesKwargs(mode=mode, dtype=torch.float32, ignore_modules=ignore)
        accelerator = Accelerator(cpu=True, mixed_precision=precision, fsdp_plugin=plugin, kwarg_handlers=[handler])
        estimate = training_bytes(quant_model(adapters, "meta"), precision, layout, accelerator.num_processes,
                                  quantization=mode, ignore_modules=ignore)[accelerator.process_index]
        model, measured = train(accelerator, quant_model(adapters), 32)
        results[f"{mode}-{adapters or 'plain'}-{layout}-{precision}"] = (measured, numbers(estimate), buckets(model))
    report("cases", results)


if __name__ == "__main__":
    main(sys.argv[1:])
