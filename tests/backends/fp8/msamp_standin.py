"""A stand-in for MS-AMP 0.4 that behaves like the real library where accel meets it.

Checked against Azure/MS-AMP (msamp/__init__.py, nn/linear.py, nn/parameter.py, nn/clip_grad.py,
common/tensor/tensor.py, optim/adamw.py):

- `initialize(model, optimizer=None, opt_level)` (FakeMSAMP, at the end) checks the model and the level, makes
  an AdamW when no optimizer is given, asserts that every optimizer parameter belongs to the model, swaps
  nn.Linear for FP8Linear (unless `use_fp32_linear`; Conv1D and other modules are left alone), names the
  ScalingParameters (`_param_name`) and has DDP ignore them, and swaps Adam/AdamW for LBAdam/LBAdamW (Adam
  tested first) with the old optimizer's defaults, edited in place as MS-AMP does: O1's fp32/fp32 and O2's
  uint8/fp16 exp_avg/exp_avg_sq dtypes, foreach/capturable/differentiable/fused dropped.
- FP8Linear's weight is a ScalingParameter: a Python object, *not* a torch.Tensor (FP16 values with a
  scale); its gradient is a ScalingTensor in FP8 E4M3 with a scale. Biases stay torch Parameters.
- LBAdam(W) admit ScalingParameters (torch's Optimizer refuses non-Tensors) and step them.
- Importing MS-AMP replaces torch._amp_foreach_non_finite_check_and_unscale_ by a wrapper that unscales
  ScalingTensor gradients by their scale_inv and checks their amax (TorchOverider); torch's GradScaler
  still asserts that every parameter is a torch.Tensor before it gets there.
- `msamp.clip_grad_norm_` clips Tensor and ScalingTensor gradients together.

Differences left, and why:
- values are computed in fp32 on the CPU (no CUDA kernels here): the forward GEMM is not FP8, and the
  weight gradient is rounded to E4M3 with a per-tensor scale but without MS-AMP's scaling-meta windows;
- FP8Linear does not call `.cuda()` (there is no CUDA device; the test checks which device is current
  while initialize runs instead), and the nn.Linear it replaces is not moved either;
- a model that is itself an nn.Linear is not replaced (MS-AMP replaces it; accel never passes one: it
  reports the root module as not converted);
- the O2 first moment is kept as dequantized fp32 values rounded through E4M3 instead of uint8 codes with
  a scale (what an update reads back is the same);
- no `model_state.register_scaling_metas`, no broadcast of the FP8 weights (one process), no DeepSpeed
  FusedAdam/DSAdam and no TransformerEngine import (`use_te` is accepted and ignored: accel never sets it);
- no FP4 (on MS-AMP's main branch after 0.4.0) and no MS-AMP DistributedDataParallel/FSDP (accel runs msamp on one
  process and says so).
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from collections.abc import Iterable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn


def _quantize(tensor: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(values in `dtype`, scale_inv, amax) with a per-tensor scale, as MS-AMP's cast does."""
    amax = tensor.detach().abs().max().float().reshape(1)
    limit = torch.finfo(dtype).max
    scale = torch.where(torch.isfinite(amax) & (amax > 0), limit / amax, torch.ones_like(amax))
    value = (tensor.detach().float() * scale).clamp(-limit, limit).to(dtype)
    return value, scale.reciprocal(), amax


class ScalingMeta:
    """msamp.common.tensor.ScalingMeta: the scale, its inverse and the amax of a ScalingTensor."""

    def __init__(self, scale_inv: torch.Tensor, amax: torch.Tensor) -> None:
        self.scale_inv = scale_inv
        self.amax = amax


class ScalingTensor:
    """msamp.common.tensor.ScalingTensor: `value` (low precision) times `meta.scale_inv`. Not a torch.Tensor."""

    def __init__(self, value: torch.Tensor, meta: ScalingMeta) -> None:
        self.value = value
        self.meta = meta

    @classmethod
    def of(cls, tensor: torch.Tensor, dtype: torch.dtype) -> ScalingTensor:
        value, scale_inv, amax = _quantize(tensor, dtype)
        return cls(value, ScalingMeta(scale_inv, amax))

    @property
    def shape(self) -> torch.Size:
        return self.value.shape

    @property
    def device(self) -> torch.device:
        return self.value.device

    @property
    def is_cuda(self) -> bool:
        return self.value.is_cuda

    def numel(self) -> int:
        return self.value.numel()

    def float(self) -> torch.Tensor:
        return self.value.float() * self.meta.scale_inv

    def to(self, dtype: torch.dtype) -> torch.Tensor:
        return self.float().to(dtype)

    def detach(self) -> ScalingTensor:
        return self

    def mul_(self, factor: Any) -> ScalingTensor:
        self.meta.scale_inv = self.meta.scale_inv * factor
        return self


class ScalingParameter(ScalingTensor):
    """msamp.nn.ScalingParameter: a ScalingTensor with requires_grad and a .grad (a ScalingTensor)."""

    def __init__(self, tensor: ScalingTensor, requires_grad: bool = True) -> None:
        super().__init__(tensor.value, tensor.meta)
        self._is_param = True
        self.requires_grad = requires_grad
        self.grad: ScalingTensor | None = None

    def set_(self, values: torch.Tensor) -> None:
        """Store new real values (FP16 with a fresh scale), as LBAdam's update does."""
        stored = ScalingTensor.of(values, torch.float16)
        self.value, self.meta = stored.value, stored.meta


class _FP8LinearFunction(torch.autograd.Function):
    """y = x W^T + b; the weight gradient goes to weight.grad as an FP8 ScalingTensor (MS-AMP's O1)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, bias: torch.Tensor | None, weight: ScalingParameter) -> torch.Tensor:
        w = weight.float()
        ctx.save_for_backward(x, w)
        ctx.weight = weight
        return F.linear(x, w.to(x.dtype), None if bias is None else bias.to(x.dtype))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        x, w = ctx.saved_tensors
        weight: ScalingParameter = ctx.weight
        g2, x2 = grad.reshape(-1, grad.shape[-1]).float(), x.reshape(-1, x.shape[-1]).float()
        grad_w = g2.t() @ x2
        if weight.grad is not None:
            grad_w = grad_w + weight.grad.float()
        weight.grad = ScalingTensor.of(grad_w, torch.float8_e4m3fn)
        grad_b = g2.sum(0) if ctx.needs_input_grad[1] else None
        return (grad @ w.to(grad.dtype)).to(x.dtype), grad_b, None


class FP8Linear(nn.Module):
    """msamp.nn.FP8Linear: a ScalingParameter weight (FP16 with a scale) and a torch bias."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self._parameters["weight"] = ScalingParameter(ScalingTensor.of(linear.weight, torch.float16))
        self.bias = nn.Parameter(linear.bias.detach().clone()) if linear.bias is not None else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _FP8LinearFunction.apply(x, self.bias, self._parameters["weight"])


FP8Linear.__module__ = "msamp.nn"


class LBAdamW(torch.optim.Optimizer):
    """msamp.optim.LBAdamW: AdamW over torch Parameters and ScalingParameters, with the state dtypes asked."""

    def __init__(self, params: Any, lr: float = 1e-3, bias_correction: bool = True, betas: Any = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False,
                 exp_avg_dtype: torch.dtype = torch.uint8, exp_avg_sq_dtype: torch.dtype = torch.float16,
                 tensor_scale: bool = True) -> None:
        if amsgrad:
            raise ValueError("Only amsgrad=False is supported for now.")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize)
        self.exp_avg_dtype, self.exp_avg_sq_dtype = exp_avg_dtype, exp_avg_sq_dtype
        self.use_adam = False
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """torch's, less its refusal of non-Tensors (MS-AMP's optimizer base admits ScalingParameters)."""
        params = param_group["params"]
        param_group["params"] = [params] if isinstance(params, (torch.Tensor, ScalingTensor)) else list(params)
        for name, default in self.defaults.items():
            param_group.setdefault(name, default)
        self.param_groups.append(param_group)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    self._update(param, group)
        return loss

    def _update(self, param: Any, group: dict[str, Any]) -> None:
        scaling = isinstance(param, ScalingParameter)
        value = param.float() if scaling else param.detach().float()
        grad = param.grad.float() if scaling else param.grad.float()
        grad = -grad if group["maximize"] else grad
        state = self.state[param]
        if not state:
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(value)
            state["exp_avg_sq"] = torch.zeros_like(value, dtype=self.exp_avg_sq_dtype)
        beta1, beta2 = group["betas"]
        state["step"] += 1
        if self.use_adam:
            grad = grad + group["weight_decay"] * value
        else:
            value = value * (1 - group["lr"] * group["weight_decay"])
        exp_avg = state["exp_avg"].float().mul_(beta1).add_(grad, alpha=1 - beta1)
        exp_avg_sq = state["exp_avg_sq"].float().mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        correction1, correction2 = 1 - beta1 ** state["step"], 1 - beta2 ** state["step"]
        denom = (exp_avg_sq / correction2).sqrt().add_(group["eps"])
        value = value - group["lr"] / correction1 * exp_avg / denom
        if self.exp_avg_dtype == torch.uint8:  # FP8 first moment: what is read back is E4M3-rounded
            stored = ScalingTensor.of(exp_avg, torch.float8_e4m3fn)
            exp_avg = stored.float()
        state["exp_avg"] = exp_avg
        state["exp_avg_sq"] = exp_avg_sq.to(state["exp_avg_sq"].dtype)
        if scaling:
            param.set_(value)
        else:
            param.copy_(value.to(param.dtype))


class LBAdam(LBAdamW):
    """msamp.optim.LBAdam: LBAdamW with L2 weight decay (use_adam=True)."""

    def __init__(self, params: Any, lr: float = 1e-3, betas: Any = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, amsgrad: bool = False, maximize: bool = False, *args: Any,
                 **kwargs: Any) -> None:
        super().__init__(params, lr, True, betas, eps, weight_decay, amsgrad, *args, maximize=maximize, **kwargs)
        self.use_adam = True


for _cls in (LBAdamW, LBAdam):
    _cls.__module__ = "msamp.optim"


def state_dtypes(opt_level: str) -> dict[str, torch.dtype]:
    """msamp.initialize: O1 keeps both Adam moments in fp32, O2 the first in FP8 (uint8) and the second in fp16."""
    if opt_level == "O2":
        return {"exp_avg_dtype": torch.uint8, "exp_avg_sq_dtype": torch.float16}
    return {"exp_avg_dtype": torch.float32, "exp_avg_sq_dtype": torch.float32}


def grad_check_and_unscale(original: Any) -> Any:
    """MS-AMP's wrapper of torch._amp_foreach_non_finite_check_and_unscale_ (TorchOverider)."""

    @torch.no_grad()
    def wrapper(grads: list[Any], found_inf: torch.Tensor, inv_scale: torch.Tensor) -> None:
        tensors = [g for g in grads if not isinstance(g, ScalingTensor)]
        scaling = [g for g in grads if isinstance(g, ScalingTensor)]
        if tensors:
            original(tensors, found_inf, inv_scale)
        if scaling:
            scale_invs = [g.meta.scale_inv for g in scaling]
            original(scale_invs, found_inf, inv_scale)
            original([g.meta.amax[0:1] for g in scaling], found_inf, torch.ones_like(inv_scale))

    return wrapper


def clip_grad_norm_(parameters: Iterable[Any] | Any, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False) -> torch.Tensor:
    """msamp.clip_grad_norm_: the total norm over Tensor and ScalingTensor gradients, clipped in place."""
    parameters = [parameters] if isinstance(parameters, (torch.Tensor, ScalingTensor)) else list(parameters)
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    norm_type = float(norm_type)
    if norm_type == float("inf"):
        total = torch.max(torch.stack([g.to(torch.float32).detach().abs().max() for g in grads]))
    else:
        total = torch.norm(torch.stack([torch.norm(g.to(torch.float32).detach(), norm_type) for g in grads]), norm_type)
    coefficient = torch.clamp(float(max_norm) / (total + 1e-6), max=1.0)
    if coefficient.item() < 1.0:
        for g in grads:
            g.detach().mul_(coefficient)
    return total


# ----------------------------------------------------------------------------- msamp.initialize
class FakeMSAMP:
    """Installs this stand-in as `msamp`, whose initialize() behaves like MS-AMP 0.4's, and
    MS-AMP's replacement of torch._amp_foreach_non_finite_check_and_unscale_."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._monkeypatch = monkeypatch
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.current_device: Any = None
        """The device torch.cuda.current_device() would give inside initialize (FP8Linear(...).cuda() goes there)."""

    def install(self, version: str = "0.4.0") -> types.ModuleType:
        module = types.ModuleType("msamp")
        module.__spec__ = importlib.machinery.ModuleSpec("msamp", None)
        module.__dict__.update(__version__=version, initialize=self._initialize, LBAdamW=LBAdamW,
                               LBAdam=LBAdam, clip_grad_norm_=clip_grad_norm_)
        self._monkeypatch.setitem(sys.modules, "msamp", module)
        self._monkeypatch.setattr(torch, "_amp_foreach_non_finite_check_and_unscale_",
                                  grad_check_and_unscale(torch._amp_foreach_non_finite_check_and_unscale_))
        return module

    def _initialize(self, model: nn.Module, optimizer: Any = None, opt_level: str = "O1", use_te: bool = False) -> Any:
        self.calls.append(("initialize", {"model": model, "optimizer": optimizer, "opt_level": opt_level,
                                          "current_device": self.current_device}))
        if opt_level not in ("O1", "O2"):
            raise ValueError(f"Invalid optimization level. Please choose from ['O1', 'O2']")
        if not isinstance(model, nn.Module):
            raise ValueError("Model must be an instance of torch.nn.Module")
        if not optimizer:
            optimizer = torch.optim.AdamW(model.parameters())  # MS-AMP's default optimizer
        if not isinstance(optimizer, (torch.optim.AdamW, torch.optim.Adam)):
            raise ValueError(f"Optimizer {optimizer} is not supported in optimization level {opt_level}")
        index = {id(p): i for i, p in enumerate(model.parameters())}
        order = []
        for group in optimizer.param_groups:
            for param in group["params"]:
                assert id(param) in index  # MS-AMP asserts every optimizer parameter belongs to the model
                order.append(index[id(param)])
        _replace_linears(model)
        params = list(model.parameters())
        positions = iter(order)
        for group in optimizer.param_groups:
            group["params"] = [params[next(positions)] for _ in group["params"]]
        defaults = optimizer.defaults  # MS-AMP edits the old optimizer's defaults in place
        defaults.update(state_dtypes(opt_level))
        for key in ("foreach", "capturable", "differentiable", "fused"):
            defaults.pop(key, None)
        cls = LBAdam if isinstance(optimizer, torch.optim.Adam) else LBAdamW  # Adam tested first
        return model, cls(optimizer.param_groups, **defaults)


def _replace_linears(model: nn.Module) -> None:
    """LinearReplacer.replace: swap the Linears, name the ScalingParameters, and have DDP ignore them
    (MS-AMP's optimizer all-reduces their gradients itself)."""
    _replace_children(model)
    names = []
    for module_name, module in model.named_modules():
        for param_name, param in module._parameters.items():
            if isinstance(param, ScalingParameter):
                param._param_name = f"{module_name}.{param_name}" if module_name else param_name
                names.append(f"{module_name}.{param_name}")
    torch.nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, names)


def _replace_children(module: nn.Module) -> None:
    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear) and not getattr(child, "use_fp32_linear", False):
            setattr(module, name, FP8Linear(child))
        else:
            _replace_children(child)
