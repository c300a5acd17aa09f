"""torch.compile(fullgraph=True) over native FP8 layers: no graph break, no recompilation, eager's numbers.

Each case trains a copy of a tiny model eagerly and another compiled (fullgraph=True raises at the
first graph break), three steps with the once-per-step scaler update in between, and compares
outputs, input gradients, weight gradients (the FP8 gradient store under O1/O2 storage) and every
scaler's state. The graph around the FP8 layers is compiled; the layers run as custom operators
whose code is eager's, so the results are equal.
"""

from __future__ import annotations

import contextlib
import copy
import shutil

import pytest
import torch
from torch import nn

from accel.backends.native_fp8 import Float8Linear, ScalerGroup

BASES = {
    "fp32": (torch.float32, None),
    "bf16-mixed": (torch.float32, torch.bfloat16),
    "fp16-mixed": (torch.float32, torch.float16),
    "bf16-true": (torch.bfloat16, None),
}


def model(compact: bool, dtype: torch.dtype, fp8_weight: bool = False) -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 48), nn.LayerNorm(48), nn.Linear(48, 16))
    for index in (0, 2, 4):
        net[index] = Float8Linear.from_linear(net[index])
    net.to(dtype)
    for index in (0, 2, 4):
        if compact:
            net[index].make_compact()
        if fp8_weight:
            net[index].keep_fp8_weight()
    return net


def layers(net: nn.Module) -> list[Float8Linear]:
    return [m for m in net.modules() if isinstance(m, Float8Linear)]


def step(net: nn.Module, seed: int, dtype: torch.dtype, autocast: torch.dtype | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One forward and backward; returns (output, input gradient). The first layer's input needs a
    gradient on odd steps only, so both kinds of backward are compiled and compared."""
    x = torch.randn(24, 32, generator=torch.Generator().manual_seed(seed)).to(dtype).requires_grad_(seed % 2 == 1)
    context = torch.autocast("cpu", autocast) if autocast is not None else contextlib.nullcontext()
    with context:
        y = net(x)
    y.float().square().mean().backward()
    return y.detach(), x.grad


def weight_gradients(net: nn.Module) -> list[torch.Tensor]:
    """Every FP8 layer's weight gradient in float32 (dequantized from the FP8 store under O1/O2), then cleared."""
    grads = []
    for layer in layers(net):
        grads.append(layer.compact.weight.grad.take() if layer.compact is not None else layer.weight.grad.float())
        layer.weight.grad = None
    return grads


def close(actual: torch.Tensor, expected: torch.Tensor, rtol: float) -> None:
    """Equal up to ``rtol`` times the largest magnitude of ``expected`` (not all zeros), element by
    element, and up to ``rtol / 5`` of it on average."""
    scale = expected.float().abs().max().item()
    assert scale > 0
    difference = (actual.float() - expected.float()).abs()
    assert difference.max().item() <= rtol * scale and difference.mean().item() <= rtol / 5 * scale


def end_step(net: nn.Module) -> None:
    """What the backend does once per optimizer step: roll the amaxes into the histories."""
    ScalerGroup({f"{i}.{r}": s for i, l in enumerate(layers(net)) for r, s in l.scalers().items()}).update()
    for layer in layers(net):
        if layer.compact is not None:
            layer.compact.weight.grad.end_step()
        if layer.fp8_weight is not None:
            layer.fp8_weight.invalidate()


def train_both(backend: str, compact: bool, base: str, rtol: float = 1e-6, fp8_weight: bool = False) -> None:
    """Eager against compiled. Gradients agree to ``rtol`` of the tensor's largest magnitude: inductor
    fuses the 16-bit elementwise work between the FP8 layers (rounding once where eager rounds after
    each op), and the FP8 casts of slightly different gradients may round apart by one FP8 step."""
    dtype, autocast = BASES[base]
    eager = model(compact, dtype, fp8_weight)
    compiled_net = copy.deepcopy(eager)
    compiled = torch.compile(compiled_net, fullgraph=True, backend=backend)
    for seed in range(4):
        # Two graphs (input gradient or not); none recompiled after the scalers' update.
        recompile = torch._dynamo.config.patch(error_on_recompile=True) if seed >= 2 else contextlib.nullcontext()
        y_eager, dx_eager = step(eager, seed, dtype, autocast)
        with recompile:
            y_compiled, dx_compiled = step(compiled, seed, dtype, autocast)
        assert y_compiled.dtype == y_eager.dtype == (autocast or dtype)
        torch.testing.assert_close(y_compiled, y_eager, rtol=0, atol=0)
        if seed % 2 == 1:
            close(dx_compiled, dx_eager, rtol)
        for g_compiled, g_eager in zip(weight_gradients(compiled_net), weight_gradients(eager), strict=True):
            close(g_compiled, g_eager, rtol)
        for a, b in zip(layers(compiled_net), layers(eager), strict=True):
            for role, scaler in a.scalers().items():
                close(scaler.step_amax, b.scalers()[role].step_amax, rtol)
                assert scaler.step_amax > 0
        end_step(eager)
        end_step(compiled_net)


@pytest.mark.parametrize(
    ("compact", "base"),
    [(False, "fp32"), (False, "bf16-mixed"), *((True, base) for base in BASES)],
    ids=lambda value: {False: "fp32-storage", True: "O1-O2-storage"}.get(value, value),
)
def test_fullgraph_compile_gives_eager_results(compact: bool, base: str) -> None:
    torch._dynamo.reset()
    train_both("aot_eager", compact, base)


def test_fullgraph_compile_with_fp8_weights() -> None:
    torch._dynamo.reset()
    train_both("aot_eager", True, "bf16-mixed", fp8_weight=True)


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="inductor needs a C++ compiler")
def test_fullgraph_compile_with_inductor() -> None:
    torch._dynamo.reset()
    train_both("inductor", True, "bf16-mixed", rtol=0.13)  # one E4M3 step (2**-3) at the top of the range
