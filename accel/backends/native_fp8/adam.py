"""O2's Adam/AdamW update for compact parameters: an FP8 first moment and a float16 second moment.

The state of a compact parameter lives in the user's optimizer (``optimizer.state[param]``),
so ``optimizer.state_dict()`` and checkpoints carry it, as tensors:

=============================  ==================  ==========================================
key                            dtype               holds
=============================  ==================  ==========================================
``step``                       float32, 0-dim      steps taken (on the CPU, as torch's Adam)
``exp_avg_sq_sqrt``            float16             ``sqrt(exp_avg_sq) * 2**k`` (pow2 scale)
``exp_avg_sq_sqrt_scale_inv``  float32, 0-dim      ``2**-k``
``exp_avg_ratio``              float8 E4M3         ``exp_avg / sqrt(exp_avg_sq) * scale``
``exp_avg_ratio_scale_inv``    float32, 0-dim      ``1 / scale`` (per-tensor current scaling)
=============================  ==================  ==========================================

Two choices differ from storing ``exp_avg`` and ``exp_avg_sq`` as they are:

* The second moment is kept as its square root (the gradient's running RMS). Squared
  gradients span twice the binary orders of magnitude of the gradients; their root fits
  float16 (with a power-of-two scale) where they would not, and the root is what the update
  divides by anyway. It is rounded stochastically, so slow decay (beta2 near 1) is not lost
  to rounding.
* The first moment is stored divided by that RMS, element by element. Adam's update is this
  ratio (up to bias corrections and eps), and it is bounded (about 3.2 at the first step for
  the default betas), so one per-tensor FP8 scale fits every element: small elements are not
  flushed to zero because some other element of the tensor is large, as happens to a
  per-tensor-scaled ``exp_avg``. It is rounded stochastically too: wherever the gradient is
  steady the ratios of a tensor sit at the same value, and round-to-nearest would move them
  all the same way at every step (measured on a quadratic: 24% off AdamW's trajectory after
  300 steps with round-to-nearest, on it with stochastic rounding).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from accel.backends.native_fp8.compact import CompactParameter
from accel.backends.native_fp8.formats import E4M3, fp8_max
from accel.backends.native_fp8.rounding import fp8_to_float, half_to_float, pow2_scale, round_to_fp8, round_to_half
from accel.backends.native_fp8.scaling import raw_scale, tensor_amax

MOMENT_DTYPE: torch.dtype = E4M3
STATE_KEYS: tuple[str, ...] = (
    "step",
    "exp_avg_sq_sqrt",
    "exp_avg_sq_sqrt_scale_inv",
    "exp_avg_ratio",
    "exp_avg_ratio_scale_inv",
)


@dataclass(frozen=True)
class AdamHyper:
    """The hyperparameters of one param_group, read at each step (a scheduler may change lr)."""

    lr: float
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    decoupled: bool
    maximize: bool

    @classmethod
    def of(cls, group: Mapping[str, Any], decoupled_default: bool) -> AdamHyper:
        beta1, beta2 = group["betas"]
        return cls(
            lr=_number(group["lr"]),
            beta1=_number(beta1),
            beta2=_number(beta2),
            eps=float(group["eps"]),
            weight_decay=float(group["weight_decay"]),
            decoupled=bool(group.get("decoupled_weight_decay", decoupled_default)),
            maximize=bool(group.get("maximize", False)),
        )


def _number(value: float | torch.Tensor) -> float:
    return float(value.item()) if isinstance(value, torch.Tensor) else float(value)


def adam_step(param: CompactParameter, state: dict[str, Any], grad: torch.Tensor, hyper: AdamHyper) -> None:
    """One Adam(W) step of ``param`` with float32 ``grad`` (consumed), its state in ``state``."""
    generator = param.generator
    weight = param.storage.working_copy()
    if hyper.maximize:
        grad.neg_()
    if hyper.weight_decay and not hyper.decoupled:
        grad.add_(weight, alpha=hyper.weight_decay)
    if "exp_avg_ratio" not in state:
        init_state(state, weight)
    step = state["step"] + 1
    rms = half_to_float(state["exp_avg_sq_sqrt"], state["exp_avg_sq_sqrt_scale_inv"])
    exp_avg = fp8_to_float(state["exp_avg_ratio"], state["exp_avg_ratio_scale_inv"]).mul_(rms)
    exp_avg.lerp_(grad, 1 - hyper.beta1)
    rms = rms.square_().mul_(hyper.beta2).addcmul_(grad, grad, value=1 - hyper.beta2).sqrt_()
    state["exp_avg_sq_sqrt_scale_inv"], state["exp_avg_sq_sqrt"], rms = _store_rms(rms, generator)
    _apply_update(weight, exp_avg, rms, step, hyper)
    param.storage.store_value(weight, generator)
    state["exp_avg_ratio_scale_inv"], state["exp_avg_ratio"] = _store_ratio(exp_avg, rms, generator)
    state["step"] = step


def _apply_update(
    weight: torch.Tensor, exp_avg: torch.Tensor, rms: torch.Tensor, step: torch.Tensor, hyper: AdamHyper
) -> None:
    """``weight -= lr * m_hat / (sqrt(v_hat) + eps)``, after decoupled decay; bias corrections as tensors."""
    if hyper.weight_decay and hyper.decoupled:
        weight.mul_(1 - hyper.lr * hyper.weight_decay)
    bias_correction1 = 1 - torch.pow(hyper.beta1, step)
    bias_correction2_sqrt = torch.sqrt(1 - torch.pow(hyper.beta2, step))
    denom = (rms / bias_correction2_sqrt).add_(hyper.eps)
    weight.sub_(torch.div(exp_avg, denom).mul_(hyper.lr / bias_correction1))


def _store_rms(
    rms: torch.Tensor, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(scale_inv, float16 storage, the stored values in float32) of the RMS (consumed)."""
    scale = pow2_scale(tensor_amax(rms))
    stored = round_to_half(rms.mul_(scale), generator)
    scale_inv = scale.reciprocal()
    return scale_inv, stored, half_to_float(stored, scale_inv)


def _store_ratio(
    exp_avg: torch.Tensor, rms: torch.Tensor, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale_inv, FP8) of ``exp_avg / rms``, taken against the *stored* RMS so that their
    product gives back ``exp_avg`` up to the FP8 rounding alone; 0 where the RMS is 0.

    Rounded stochastically: the ratios of a tensor's elements often sit close together
    (about 1 wherever the gradient is steady), so round-to-nearest would push them all the
    same way, step after step, and bias the update by up to half an FP8 ulp (6%).
    """
    ratio = torch.where(rms > 0, exp_avg.div_(rms), 0.0)
    amax = tensor_amax(ratio)
    limit = fp8_max(MOMENT_DTYPE)
    scale = raw_scale(amax, amax.new_full((), limit))
    return scale.reciprocal(), round_to_fp8(ratio.mul_(scale), MOMENT_DTYPE, limit, generator)


def init_state(state: dict[str, Any], like: torch.Tensor) -> None:
    """Fill ``state`` for a parameter that has none, or convert torch Adam's ``exp_avg``/``exp_avg_sq``."""
    device = like.device
    one = torch.ones((), dtype=torch.float32, device=device)
    exp_avg = state.pop("exp_avg", None)
    exp_avg_sq = state.pop("exp_avg_sq", None)
    # On the CPU, as torch's (non-capturable) Adam keeps it: no device sync to read it.
    state["step"] = torch.as_tensor(state.get("step", 0.0), dtype=torch.float32, device="cpu")
    if exp_avg is None or exp_avg_sq is None:
        state["exp_avg_sq_sqrt"] = torch.zeros(like.shape, dtype=torch.float16, device=device)
        state["exp_avg_sq_sqrt_scale_inv"] = one
        state["exp_avg_ratio"] = torch.zeros(like.shape, dtype=MOMENT_DTYPE, device=device)
        state["exp_avg_ratio_scale_inv"] = one
        return
    rms = exp_avg_sq.detach().to(device, torch.float32, copy=True).sqrt_()
    state["exp_avg_sq_sqrt_scale_inv"], state["exp_avg_sq_sqrt"], rms = _store_rms(rms, None)
    moment = exp_avg.detach().to(device, torch.float32, copy=True)
    state["exp_avg_ratio_scale_inv"], state["exp_avg_ratio"] = _store_ratio(moment, rms, None)

