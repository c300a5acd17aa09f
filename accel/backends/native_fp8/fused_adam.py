"""O2's Adam step for one compact parameter as one fused CPU kernel (the math and state: adam.py).

adam.adam_step reads the parameter's float16 storage, its FP8 first moment and float16 RMS,
updates them and rounds all three back, stochastically: about forty eager passes over the
parameter. Here the same arithmetic is one inductor-compiled kernel (fused.compile_kernel).

The random bits of the three stochastic roundings are drawn from the parameter's generator
exactly as the eager step draws them (rounding.random_low_bits, in the same order), and the
kernel rounds with them as stochastic_truncate_ does, in float arithmetic instead of bit
operations: ``floor(a / ulp + noise * 2**-bits) * ulp`` with ``ulp`` the spacing of ``a``'s
binade (Veltkamp's splitting finds its power of two; no bit casts, which inductor vectorizes
poorly). So the stored bytes are those of the eager step up to the order of float operations
inside the kernel (tested: the same storage for nearly every element, losses of a training
run equal to the eager step's to 1e-6).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from accel.backends.native_fp8 import fused
from accel.backends.native_fp8.adam import MOMENT_DTYPE, AdamHyper
from accel.backends.native_fp8.compact import CompactParameter, StepGradient
from accel.backends.native_fp8.formats import fp8_max
from accel.backends.native_fp8.grads import GRADIENT_DTYPE
from accel.backends.native_fp8.kernel_math import noise, stochastic_round, to_half_keyed, to_real_half_keyed
from accel.backends.native_fp8.rounding import FP8_DROPPED_BITS, random_keys

_FP8_DROPPED_BITS = FP8_DROPPED_BITS[MOMENT_DTYPE]
"""float32 has 23 mantissa bits, E4M3 3: stochastic rounding to E4M3 draws 20 random bits."""
_SCALARS = 13
"""0-dim inputs of the kernel (see :func:`adam_step`)."""


def _kernel(
    weight16: torch.Tensor, grad: torch.Tensor, rms16: torch.Tensor, ratio8: torch.Tensor,
    keys_rms: torch.Tensor, keys_weight: torch.Tensor, keys_ratio: torch.Tensor, *scalars: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """adam.adam_step's arithmetic on 1-D tensors; returns the new storage and their scale_invs."""
    (grad_inv, weight_inv, rms_inv, ratio_inv, sign, l2, one_minus_beta1, beta2, one_minus_beta2, decay,
     bias_correction2_sqrt, eps, step_size) = scalars
    weight = weight16.float() * weight_inv
    grad = grad.float() * grad_inv * sign + l2 * weight
    rms = rms16.float() * rms_inv
    exp_avg = torch.lerp(ratio8.float() * ratio_inv * rms, grad, one_minus_beta1)
    rms = torch.sqrt(rms * rms * beta2 + one_minus_beta2 * grad * grad)
    rms16_new, rms_inv_new = to_half_keyed(rms, keys_rms)
    rms = rms16_new.float() * rms_inv_new  # the stored RMS: the update and the ratio divide by it
    weight = weight * decay - exp_avg / (rms / bias_correction2_sqrt + eps) * step_size
    weight16_new, weight_inv_new = to_real_half_keyed(weight, keys_weight)
    ratio = torch.where(rms > 0, exp_avg / rms, 0.0)
    limit = fp8_max(MOMENT_DTYPE)
    ratio_scale = torch.nan_to_num(limit / ratio.abs().amax(), posinf=torch.finfo(torch.float32).max)
    ratio_noise = noise(ratio, keys_ratio, _FP8_DROPPED_BITS)
    ratio8_new = stochastic_round(ratio * ratio_scale, ratio_noise, _FP8_DROPPED_BITS).clamp(-limit, limit).to(MOMENT_DTYPE)
    return weight16_new, weight_inv_new, rms16_new, rms_inv_new, ratio8_new, ratio_scale.reciprocal()


@functools.cache
def _compiled(grad_dtype: torch.dtype) -> Callable[..., tuple[torch.Tensor, ...]]:
    """The kernel for gradients in ``grad_dtype``: the FP8 store's (decoded in the loop), or float32."""
    n = 16
    examples = [
        torch.zeros(n, dtype=torch.float16), torch.zeros(n, dtype=grad_dtype), torch.zeros(n, dtype=torch.float16),
        torch.zeros(n, dtype=MOMENT_DTYPE), *(torch.zeros(2, dtype=torch.int32) for _ in range(3)),
        *(torch.ones(()) for _ in range(_SCALARS)),
    ]
    return fused.compile_kernel(_kernel, examples)


def supports(param: CompactParameter, state: dict[str, Any], grad: torch.Tensor) -> bool:
    """Can :func:`adam_step` run this step with gradient values ``grad`` (FP8 or float32): a CPU
    parameter with its O2 state, rounding stochastically, where the fused kernels run."""
    return (
        param.generator is not None and grad.device.type == "cpu" and "exp_avg_ratio" in state
        and grad.dtype in (torch.float32, GRADIENT_DTYPE)
        and not param.storage.materialised and grad.is_contiguous() and param.param.data.is_contiguous()
        and fused.available()
    )


def adam_step(param: CompactParameter, state: dict[str, Any], grad: StepGradient, hyper: AdamHyper) -> None:
    """adam.adam_step in one kernel (see :func:`supports`), reading FP8 gradients as they are stored."""
    generator = param.generator
    assert generator is not None
    storage = param.storage
    step = state["step"] + 1
    keys = [random_keys(generator) for _ in range(3)]  # the rms's, the weight's, the ratio's: the eager order
    scalars = _scalars(hyper, step, storage.scale_inv, state)
    outputs = _compiled(grad.values.dtype)(
        param.param.data.reshape(-1), grad.values.reshape(-1), state["exp_avg_sq_sqrt"].reshape(-1),
        state["exp_avg_ratio"].reshape(-1), *keys, grad.scale_inv, *scalars,
    )
    weight16, weight_inv, rms16, rms_inv, ratio8, ratio_inv = outputs
    shape = grad.values.shape
    storage.store_encoded(weight16.view(shape), weight_inv)
    state["exp_avg_sq_sqrt"], state["exp_avg_sq_sqrt_scale_inv"] = rms16.view(shape), rms_inv
    state["exp_avg_ratio"], state["exp_avg_ratio_scale_inv"] = ratio8.view(shape), ratio_inv
    state["step"] = step


def _scalars(hyper: AdamHyper, step: torch.Tensor, weight_inv: torch.Tensor, state: dict[str, Any]) -> list[torch.Tensor]:
    """The kernel's 0-dim inputs, computed as adam.py computes them."""
    def scalar(value: float | torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(value, dtype=torch.float32)

    decay = 1 - hyper.lr * hyper.weight_decay if hyper.weight_decay and hyper.decoupled else 1.0
    l2 = hyper.weight_decay if hyper.weight_decay and not hyper.decoupled else 0.0
    bias_correction1 = 1 - torch.pow(hyper.beta1, step)
    bias_correction2_sqrt = torch.sqrt(1 - torch.pow(hyper.beta2, step))
    return [
        weight_inv, state["exp_avg_sq_sqrt_scale_inv"], state["exp_avg_ratio_scale_inv"],
        scalar(-1.0 if hyper.maximize else 1.0), scalar(l2), scalar(1 - hyper.beta1), scalar(hyper.beta2),
        scalar(1 - hyper.beta2), scalar(decay), bias_correction2_sqrt, scalar(hyper.eps), hyper.lr / bias_correction1,
    ]
