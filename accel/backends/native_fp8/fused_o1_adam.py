"""O1's step for torch's Adam and AdamW, on compact parameters, as one fused CPU kernel.

O1 runs the user's optimizer on float32 copies: materialise the float16 weights and FP8
gradients into float32 ``param.data`` / ``param.grad``, let torch's Adam take about eight
passes over them, then round the result back into float16 (compact.py, levels.O1). When the
optimizer is torch's own Adam or AdamW, that whole sequence is one inductor-compiled loop
here (fused.compile_kernel): read the float16 storage, the float32 gradient and moments,
apply torch's single-tensor Adam arithmetic in its order, and round the new weights into
storage stochastically, with a fresh power-of-two scale.

Nothing a user sees changes. The moments stay where torch keeps them, with torch's keys and
dtypes (``optimizer.state[param]``: float32 ``exp_avg`` and ``exp_avg_sq``, a 0-dim float32
``step``), so checkpoints, ``load_state_dict`` and a later eager step all read them as
torch's. The random bits of the stochastic rounding are drawn from the same generator in
the same order as the eager path's (one draw of float16's 13 dropped bits per element, in
the group's parameter order), so the stored weights are the eager path's up to the order of
float operations in the Adam arithmetic (tested).

Taken only where it is exactly torch's Adam(W) (:func:`accepts`): no amsgrad, capturable or
differentiable, no step pre-hooks that could read or change gradients. Anything else runs
the eager O1 path.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch.optim import optimizer as torch_optimizer

from accel.backends.native_fp8 import fused
from accel.backends.native_fp8.adam import AdamHyper
from accel.backends.native_fp8.compact import CompactParameter, StepGradient
from accel.backends.native_fp8.grads import GRADIENT_DTYPE
from accel.backends.native_fp8.kernel_math import to_real_half_keyed
from accel.backends.native_fp8.rounding import random_keys

_HYPER = ("sign", "l2", "decay", "one_minus_beta1", "beta2", "one_minus_beta2", "bias_correction2_sqrt", "eps", "neg_step_size")
"""The group's float32 scalars, in the order the kernel reads them from its 1-D ``hyper`` input."""


def _kernel(
    weight: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
    keys: torch.Tensor, weight_inv: torch.Tensor, grad_inv: torch.Tensor, hyper: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """torch's _single_tensor_adam on the real weights ``weight * weight_inv`` with the real gradient
    ``grad * grad_inv`` (FP8 or float32), then HalfWeight.encode."""
    sign, l2, decay, one_minus_beta1, beta2, one_minus_beta2, bias_correction2_sqrt, eps, neg_step_size = hyper.unbind()
    value = weight.float() * weight_inv
    grad = grad.float() * grad_inv * sign + l2 * value  # maximize; Adam's L2 term (0 for AdamW)
    value = value * decay  # AdamW's decoupled decay (1 for Adam)
    exp_avg = torch.lerp(exp_avg, grad, one_minus_beta1)
    exp_avg_sq = exp_avg_sq * beta2 + one_minus_beta2 * (grad * grad)
    denom = torch.sqrt(exp_avg_sq) / bias_correction2_sqrt + eps
    value = value + neg_step_size * (exp_avg / denom)
    stored, scale_inv = to_real_half_keyed(value, keys)
    return stored, scale_inv, exp_avg, exp_avg_sq


@functools.cache
def _compiled(weight_dtype: torch.dtype, grad_dtype: torch.dtype) -> Callable[..., tuple[torch.Tensor, ...]]:
    """The kernel for weights in ``weight_dtype`` (float16 storage, or float32 once materialised for
    clipping) and gradients in ``grad_dtype`` (the FP8 store's, or float32)."""
    n = 16
    examples = [
        torch.zeros(n, dtype=weight_dtype), torch.zeros(n, dtype=grad_dtype), torch.zeros(n), torch.zeros(n),
        torch.zeros(2, dtype=torch.int32), torch.ones(()), torch.ones(()), torch.ones(len(_HYPER)),
    ]
    return fused.compile_kernel(_kernel, examples)


def accepts(optimizer: torch.optim.Optimizer) -> bool:
    """Is ``optimizer`` exactly torch's Adam or AdamW, in a configuration :func:`adam_step` computes?"""
    if type(optimizer).step not in (torch.optim.Adam.step, torch.optim.AdamW.step):
        return False
    if getattr(optimizer, "_optimizer_step_pre_hooks", None) or getattr(torch_optimizer, "_global_optimizer_pre_hooks", None):
        return False  # a pre-hook may read or change the gradients, which the fused step never puts in param.grad
    return not any(
        group.get("amsgrad") or group.get("capturable") or group.get("differentiable")
        for group in optimizer.param_groups
    )


def supports(param: CompactParameter, state: dict[str, Any], grad: torch.Tensor) -> bool:
    """Can :func:`adam_step` update ``param`` with gradient values ``grad`` (FP8 or float32): on the
    CPU, rounding stochastically, contiguous, its state (if any) torch's float32 moments, where the
    fused kernels run."""
    data = param.param.data
    return (
        param.generator is not None and grad.device.type == "cpu" and data.device.type == "cpu"
        and grad.is_contiguous() and data.is_contiguous() and data.dtype in (torch.float16, torch.float32)
        and grad.dtype in (torch.float32, GRADIENT_DTYPE)
        and (not state or _is_torch_state(state, data))
        and fused.available()
    )


def _is_torch_state(state: dict[str, Any], data: torch.Tensor) -> bool:
    """torch's Adam state on the CPU: a 0-dim tensor ``step``, float32 contiguous moments of ``data``'s shape."""
    step = state.get("step")
    if not isinstance(step, torch.Tensor) or step.dim() != 0 or step.device.type != "cpu":
        return False
    return all(
        isinstance(value, torch.Tensor) and value.dtype == torch.float32 and value.device.type == "cpu"
        and value.shape == data.shape and value.is_contiguous()
        for value in (state.get("exp_avg"), state.get("exp_avg_sq"))
    )


def group_scalars(hyper: AdamHyper, step: float) -> torch.Tensor:
    """The kernel's ``hyper`` input for a param_group at ``step`` (after its increment), computed as
    torch's single-tensor Adam computes them: bias corrections in Python floats."""
    bias_correction1 = 1 - hyper.beta1**step
    bias_correction2 = 1 - hyper.beta2**step
    decoupled = hyper.weight_decay != 0 and hyper.decoupled
    values = {
        "sign": -1.0 if hyper.maximize else 1.0,
        "l2": hyper.weight_decay if not hyper.decoupled else 0.0,
        "decay": 1 - hyper.lr * hyper.weight_decay if decoupled else 1.0,
        "one_minus_beta1": 1 - hyper.beta1,
        "beta2": hyper.beta2,
        "one_minus_beta2": 1 - hyper.beta2,
        "bias_correction2_sqrt": math.sqrt(bias_correction2),
        "eps": hyper.eps,
        "neg_step_size": -(hyper.lr / bias_correction1),
    }
    return torch.tensor([values[name] for name in _HYPER], dtype=torch.float32)


def adam_step(param: CompactParameter, state: dict[str, Any], grad: StepGradient, hyper: AdamHyper) -> None:
    """One Adam(W) step of compact ``param`` with ``grad``, its torch state in ``state``
    (created as torch creates it on the first step); the new weights go into its storage."""
    generator = param.generator
    assert generator is not None
    data = param.param.data
    if "step" not in state:
        state["step"] = torch.zeros((), dtype=torch.float32)
        state["exp_avg"] = torch.zeros_like(data, dtype=torch.float32)
        state["exp_avg_sq"] = torch.zeros_like(data, dtype=torch.float32)
    step = state["step"].add_(1)
    stored, scale_inv, exp_avg, exp_avg_sq = _compiled(data.dtype, grad.values.dtype)(
        data.reshape(-1), grad.values.reshape(-1), state["exp_avg"].reshape(-1), state["exp_avg_sq"].reshape(-1),
        random_keys(generator), param.storage.data_scale_inv, grad.scale_inv, group_scalars(hyper, float(step)),
    )
    param.storage.store_encoded(stored.view(data.shape), scale_inv)
    state["exp_avg"], state["exp_avg_sq"] = exp_avg.view(data.shape), exp_avg_sq.view(data.shape)
