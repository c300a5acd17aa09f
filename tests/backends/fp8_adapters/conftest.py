"""Stand-ins for TransformerEngine and MS-AMP, and a pretend CUDA FP8 GPU.

TransformerEngine and MS-AMP cannot be installed without CUDA. These stand-ins are installed
into sys.modules by fixtures. They have the real signatures (checked against the libraries'
source: TE 2.x `transformer_engine/pytorch/quantization.py`, `common/recipe/__init__.py`,
`module/linear.py`, `module/layernorm.py`; MS-AMP `msamp/__init__.py`), reject every keyword
the real API does not take, compute what the real modules compute (in fp32, on the CPU), and
record every call. Unlike the real pydantic recipes, which silently ignore unknown keywords,
the stand-in recipes raise on them, so a test fails if accel passes a field TE would drop.
"""

from __future__ import annotations

import contextlib
import enum
import importlib.machinery
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import accel.backends.fp8 as fp8
import accel.backends.fp8_ao as fp8_ao
import accel.backends.fp8_msamp as fp8_msamp
import accel.backends.fp8_te as fp8_te

Calls = list[tuple[str, dict[str, Any]]]


def _module(name: str, **attributes: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    module.__dict__.update(attributes)
    return module


# ----------------------------------------------------------------------------- TransformerEngine
class Format(enum.Enum):
    """transformer_engine.common.recipe.Format: (max forward, max backward)."""

    E4M3 = (448, 448)
    E5M2 = (57344, 57344)
    HYBRID = (448, 57344)


def _recipe_classes(calls: Calls) -> dict[str, type]:
    """The TE 2.x recipe classes with their real fields; unknown keywords raise TypeError."""

    @dataclass
    class DelayedScaling:
        margin: int = 0
        fp8_format: Format = Format.HYBRID
        amax_history_len: int = 1024
        amax_compute_algo: Any = "max"
        scaling_factor_compute_algo: Any = None
        reduce_amax: bool = True
        fp8_dpa: bool = False
        fp8_mha: bool = False

        def __post_init__(self) -> None:
            assert self.fp8_format != Format.E5M2, "Pure E5M2 training is not supported."

    @dataclass
    class Float8CurrentScaling:
        fp8_format: Format = Format.HYBRID
        fp8_dpa: bool = False
        fp8_mha: bool = False

    @dataclass
    class MXFP8BlockScaling:
        margin: int = 0
        fp8_format: Format = Format.E4M3
        fp8_dpa: bool = False
        fp8_mha: bool = False

    @dataclass
    class Float8BlockScaling:
        fp8_format: Format = Format.E4M3
        x_block_scaling_dim: int = 1
        w_block_scaling_dim: int = 2
        grad_block_scaling_dim: int = 1

    classes = [DelayedScaling, Float8CurrentScaling, MXFP8BlockScaling, Float8BlockScaling]
    return {cls.__name__: _recording(cls, calls) for cls in classes}


def _recording(cls: type, calls: Calls) -> type:
    """`cls` with every construction recorded as (class name, keyword arguments)."""

    class Recorded(cls):  # type: ignore[valid-type, misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            if args:
                raise TypeError(f"{cls.__name__}: pass recipe fields by keyword")
            super().__init__(**kwargs)
            calls.append((cls.__name__, kwargs))

    Recorded.__name__ = Recorded.__qualname__ = cls.__name__
    return Recorded


@dataclass
class TEState:
    """What the stand-in TE saw: calls, and the autocast state modules ran under."""

    calls: Calls = field(default_factory=list)
    active: list[tuple[bool, Any]] = field(default_factory=list)
    forwards: list[tuple[str, bool, Any]] = field(default_factory=list)

    def autocast_calls(self) -> Calls:
        return [c for c in self.calls if c[0] in ("autocast", "fp8_autocast")]


def _te_linear(state: TEState) -> type:
    """te.Linear: an nn.Module (not an nn.Linear) with TE's signature and extra state."""

    class Linear(nn.Module):
        def __init__(
            self, in_features: int, out_features: int, sequence_parallel: bool = False,
            fuse_wgrad_accumulation: bool = False, tp_group: Any = None, tp_size: int = 1,
            get_rng_state_tracker: Any = None, rng_tracker_name: Any = None, init_method: Any = None,
            bias: bool = True, return_bias: bool = False, params_dtype: torch.dtype | None = None,
            parallel_mode: str | None = None, parameters_split: Any = None, device: Any = "cuda",
            name: str | None = None,
        ) -> None:
            super().__init__()
            state.calls.append(("Linear", {"in_features": in_features, "out_features": out_features, "bias": bias,
                                           "params_dtype": params_dtype, "device": device}))
            dtype = params_dtype or torch.get_default_dtype()
            self.in_features, self.out_features = in_features, out_features
            self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=dtype, device=device))
            if bias:
                self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype, device=device))
            else:  # TE sets an empty plain tensor, not None
                self.bias = torch.Tensor().to(dtype=dtype, device=device)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            state.forwards.append(("Linear", *(state.active[-1] if state.active else (False, None))))
            return F.linear(x, self.weight, self.bias if self.bias.numel() else None)

        def get_extra_state(self) -> torch.Tensor:
            return torch.zeros(4, dtype=torch.uint8)  # TE pickles its FP8 metadata into a uint8 tensor

        def set_extra_state(self, value: Any) -> None:
            pass

    return Linear


def _te_layer_norm(state: TEState) -> type:
    """te.LayerNorm with TE's signature (normalized_shape, then keywords; params_dtype is TE's older dtype)."""

    class LayerNorm(nn.Module):
        def __init__(  # TE 2.x: keywords only after normalized_shape (older TE took them positionally too)
            self, normalized_shape: int, *, eps: float = 1e-5, sequence_parallel: bool | None = None,
            params_dtype: torch.dtype | None = None, zero_centered_gamma: bool = False, device: Any = None,
            dtype: torch.dtype | None = None, sm_margin: int = 0,
        ) -> None:
            super().__init__()
            state.calls.append(("LayerNorm", {"normalized_shape": normalized_shape, "eps": eps,
                                              "params_dtype": params_dtype, "device": device}))
            dtype = params_dtype or torch.get_default_dtype()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(normalized_shape, dtype=dtype, device=device))
            self.bias = nn.Parameter(torch.zeros(normalized_shape, dtype=dtype, device=device))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)

    return LayerNorm


def _autocasts(state: TEState, generation: str) -> dict[str, Callable[..., Any]]:
    """te.autocast (TE >= 2.9) and te.fp8_autocast, with their real keyword names."""

    @contextlib.contextmanager
    def region(name: str, enabled: bool, recipe: Any, **rest: Any) -> Iterator[None]:
        state.calls.append((name, {"enabled": enabled, "recipe": recipe, **rest}))
        state.active.append((enabled, recipe))
        try:
            yield
        finally:
            state.active.pop()

    def autocast(enabled: bool = True, calibrating: bool = False, recipe: Any = None,
                 amax_reduction_group: Any = None) -> Any:
        return region("autocast", enabled, recipe)

    def fp8_autocast(enabled: bool = generation == "autocast", calibrating: bool = False, fp8_recipe: Any = None,
                     fp8_group: Any = None) -> Any:
        return region("fp8_autocast", enabled, fp8_recipe)

    return {"autocast": autocast, "fp8_autocast": fp8_autocast} if generation == "autocast" else {
        "fp8_autocast": fp8_autocast}


class FakeTE:
    """Installs a stand-in `transformer_engine` of one API generation into sys.modules."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._monkeypatch = monkeypatch
        self.state = TEState()

    def install(self, generation: str = "autocast", version: str = "2.10.0", recipes: tuple[str, ...] | None = None,
                probes: dict[str, tuple[bool, str]] | None = None) -> types.ModuleType:
        """generation 'autocast' (TE >= 2.9) or 'fp8_autocast' (older); probes: is_*_available answers."""
        self.state = TEState()
        classes = _recipe_classes(self.state.calls)
        if recipes is not None:
            classes = {name: cls for name, cls in classes.items() if name in recipes}
        recipe = _module("transformer_engine.common.recipe", Format=Format, **classes)
        common = _module("transformer_engine.common", recipe=recipe)
        pytorch = _module("transformer_engine.pytorch", Linear=_te_linear(self.state),
                          LayerNorm=_te_layer_norm(self.state),
                          **_autocasts(self.state, generation))
        for probe, answer in (probes or {}).items():
            setattr(pytorch, probe, _probe(answer))
        root = _module("transformer_engine", __version__=version, common=common, pytorch=pytorch)
        for module in (root, common, recipe, pytorch):
            self._monkeypatch.setitem(sys.modules, module.__name__, module)
        self.te = pytorch
        return pytorch


def _probe(answer: tuple[bool, str]) -> Callable[..., Any]:
    """te.is_*_available(return_reason=False): a bool, or (bool, reason) when asked for the reason."""

    def probe(return_reason: bool = False) -> Any:
        return answer if return_reason else answer[0]

    return probe


@pytest.fixture
def fake_te(monkeypatch: pytest.MonkeyPatch) -> FakeTE:
    """A stand-in TransformerEngine factory; call `.install(...)` to put one in sys.modules."""
    return FakeTE(monkeypatch)


# ----------------------------------------------------------------------------- MS-AMP
def _msamp_optimizers() -> tuple[type, type]:
    """LBAdamW and LBAdam with MS-AMP's constructor signatures (no decoupled_weight_decay, foreach...)."""

    class LBAdamW(torch.optim.AdamW):
        def __init__(self, params: Any, lr: float = 1e-3, bias_correction: bool = True, betas: Any = (0.9, 0.999),
                     eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False,
                     exp_avg_dtype: torch.dtype = torch.uint8, exp_avg_sq_dtype: torch.dtype = torch.float16,
                     tensor_scale: bool = True) -> None:
            if amsgrad:
                raise ValueError("Only amsgrad=False is supported for now.")
            super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize)
            self.exp_avg_dtype, self.exp_avg_sq_dtype = exp_avg_dtype, exp_avg_sq_dtype
            self.use_adam = False

    class LBAdam(LBAdamW):
        def __init__(self, params: Any, lr: float = 1e-3, betas: Any = (0.9, 0.999), eps: float = 1e-8,
                     weight_decay: float = 0, amsgrad: bool = False, maximize: bool = False, *args: Any,
                     **kwargs: Any) -> None:
            super().__init__(params, lr, True, betas, eps, weight_decay, amsgrad, *args, maximize=maximize, **kwargs)
            self.use_adam = True

    for cls in (LBAdamW, LBAdam):
        cls.__module__ = "msamp.optim"
    return LBAdamW, LBAdam


class FP8Linear(nn.Module):
    """msamp.nn.FP8Linear: its own Parameters, the same product (fp32 here)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = nn.Parameter(linear.weight.detach().clone())
        self.bias = nn.Parameter(linear.bias.detach().clone()) if linear.bias is not None else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


FP8Linear.__module__ = "msamp.nn"


class FakeMSAMP:
    """Installs a stand-in `msamp` whose initialize() behaves like MS-AMP 0.4's (isinstance order included)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._monkeypatch = monkeypatch
        self.calls: Calls = []

    def install(self, version: str = "0.4.0") -> types.ModuleType:
        lb_adamw, lb_adam = _msamp_optimizers()
        module = _module("msamp", __version__=version, initialize=self._initialize, LBAdamW=lb_adamw, LBAdam=lb_adam)
        self._classes = (lb_adamw, lb_adam)
        self._monkeypatch.setitem(sys.modules, "msamp", module)
        return module

    def _initialize(self, model: nn.Module, optimizer: Any = None, opt_level: str = "O1", use_te: bool = False) -> Any:
        self.calls.append(("initialize", {"model": model, "optimizer": optimizer, "opt_level": opt_level}))
        if opt_level not in ("O1", "O2"):
            raise ValueError(f"Invalid optimization level. Please choose from ['O1', 'O2']")
        if not isinstance(optimizer, (torch.optim.AdamW, torch.optim.Adam)):
            raise ValueError(f"Optimizer {optimizer} is not supported in optimization level {opt_level}")
        index = {id(p): i for i, p in enumerate(model.parameters())}
        order = [index[id(p)] for group in optimizer.param_groups for p in group["params"]]
        _replace_linears(model)
        params = list(model.parameters())
        positions = iter(order)
        for group in optimizer.param_groups:
            group["params"] = [params[next(positions)] for _ in group["params"]]
        defaults = dict(optimizer.defaults)
        for key in ("foreach", "capturable", "differentiable", "fused"):
            defaults.pop(key, None)
        lb_adamw, lb_adam = self._classes
        cls = lb_adam if isinstance(optimizer, torch.optim.Adam) else lb_adamw  # MS-AMP tests Adam first
        return model, cls(optimizer.param_groups, **defaults)


def _replace_linears(module: nn.Module) -> None:
    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear) and not getattr(child, "use_fp32_linear", False):
            setattr(module, name, FP8Linear(child))
        else:
            _replace_linears(child)


@pytest.fixture
def fake_msamp(monkeypatch: pytest.MonkeyPatch) -> FakeMSAMP:
    """A stand-in MS-AMP factory; call `.install()` to put one in sys.modules."""
    return FakeMSAMP(monkeypatch)


# ----------------------------------------------------------------------------- devices
@pytest.fixture
def fp8_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend the device is a CUDA GPU with FP8: every capability check that asks says yes."""
    for module in (fp8, fp8_te, fp8_msamp, fp8_ao):
        monkeypatch.setattr(module, "cuda_fp8_reason", lambda device: None)
