"""The native FP8 backend on a CUDA GPU with FP8 (compute capability 8.9+): the real ``torch._scaled_mm``.

Skipped elsewhere, with the reason. On the CPU the same layers compute from exact upcasts of
the FP8 operands (cpu_gemm.py); here the GEMMs are torch._scaled_mm's, with CUDA's rules
(row-major first operand, column-major second, dimensions multiples of 16), which the CPU
path cannot check. Run: ``python -m pytest -m fp8_gpu tests/backends/native_fp8/test_cuda.py``.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from accel import Accelerator, FP8RecipeKwargs
from accel.backends.native_fp8 import Float8Config, Float8Linear


def _reason() -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA GPU here (torch sees none)"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < (8, 9):
        return f"the GPU has compute capability {major}.{minor}; torch._scaled_mm needs 8.9 or newer"
    return None


pytestmark = [pytest.mark.fp8_gpu, pytest.mark.skipif(_reason() is not None, reason=f"needs a CUDA FP8 GPU: {_reason()}")]
CONFIG = Float8Config(amax_history_len=4)


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual.float().cpu() - expected.float().cpu()).norm() / expected.float().cpu().norm())


def forward_backward(layer: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = x.clone().requires_grad_(True)
    y = layer(x)
    y.square().sum().backward()
    return y.detach(), x.grad, layer.weight.grad


@pytest.mark.parametrize("tokens", [64, 40])  # 40: the weight-gradient GEMM is padded to CUDA's multiple of 16
def test_float8_linear_on_cuda_matches_the_cpu_path(tokens: int) -> None:
    torch.manual_seed(0)
    linear, x = nn.Linear(64, 128), torch.randn(tokens, 64)
    cpu = forward_backward(Float8Linear.from_linear(copy.deepcopy(linear), CONFIG), x)
    cuda = forward_backward(Float8Linear.from_linear(copy.deepcopy(linear).cuda(), CONFIG), x.cuda())
    for got, want in zip(cuda, cpu):  # same FP8 operands; only the accumulation order differs
        assert relative_error(got, want) < 1e-2


def test_float8_conv1d_on_cuda_matches_the_cpu_path() -> None:
    Conv1D = pytest.importorskip("transformers.pytorch_utils").Conv1D
    from accel.backends.native_fp8 import Float8Conv1D

    torch.manual_seed(0)
    conv, x = Conv1D(128, 64), torch.randn(48, 64)
    cpu = forward_backward(Float8Conv1D.from_conv1d(copy.deepcopy(conv), CONFIG), x)
    cuda = forward_backward(Float8Conv1D.from_conv1d(copy.deepcopy(conv).cuda(), CONFIG), x.cuda())
    for got, want in zip(cuda, cpu):
        assert relative_error(got, want) < 1e-2


@pytest.mark.parametrize("recipe", [{}, {"optimization_level": "O2"}, {"fp8_params": True}, {"base_precision": "fp16"}])
def test_the_example_gpt_trains_on_cuda_like_bf16(recipe: dict[str, object]) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
    from gpt import GPT, GPTConfig

    def train(mixed_precision: str, **fields: object) -> float:
        # small_layer_dim=0: width 128 is below the small-layer filter's GPU default; the test compares FP8 training
        handlers = [FP8RecipeKwargs(backend="native", small_layer_dim=0, **fields)] if mixed_precision == "fp8" else []
        accelerator = Accelerator(mixed_precision=mixed_precision, kwarg_handlers=handlers)
        torch.manual_seed(0)
        model = GPT(GPTConfig(n_layer=2, n_embd=128))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model, optimizer = accelerator.prepare(model, optimizer)
        tokens = torch.randint(0, 96, (16, 65), generator=torch.Generator().manual_seed(1)).cuda()
        for _ in range(60):
            logits = model(tokens[:, :-1])
            loss = nn.functional.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        return loss.item()

    reference, fp8 = train("bf16"), train("fp8", **recipe)
    assert abs(fp8 - reference) < 0.05 * reference
