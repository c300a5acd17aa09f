"""A stand-in for TransformerEngine 2.x that behaves like the real library where accel meets it.

TransformerEngine cannot be installed without CUDA. FakeTE installs this stand-in into sys.modules.
It has the real signatures (checked against NVIDIA/TransformerEngine at v2.0, v2.2, v2.3, v2.5, v2.8,
v2.9, v2.10, v2.15, v2.16 and v2.18: `transformer_engine/pytorch/quantization.py` (fp8.py before
2.9), `common/recipe/__init__.py`, `module/linear.py`, `module/layernorm.py`), rejects every
keyword the real functions do not take, computes what the real modules compute (in fp32, on the
CPU), and records every call.

- The recipes are pydantic dataclasses as TE's are, with TE's fields at the installed version
  (Float8CurrentScaling from 2.2, Float8BlockScaling from 2.3, NVFP4BlockScaling and Format.E2M1
  from 2.8, `backward_override` on every recipe from 2.15) and TE's __post_init__ asserts (no E5M2;
  DelayedScaling takes only backward_override=None; NVFP4 only E4M3 scales and E2M1 values). Like
  TE's, they drop unknown keywords silently; the stand-in notes each one in `state.dropped` and the
  fixture fails the test, so accel passing a field TE would drop cannot go unseen.
- te.Linear's forward under FP8 autocast runs assert_dim_for_fp8_exec(inputmat, weight): the input's
  tokens % 8 and width % 16, the weight's out_features % 8 and in_features % 16; with MXFP8 both dims
  % 32 (TE's C++ quantizer). The message is TE >= 2.9's for the autocast generation, older TE's else.
- entering an enabled autocast checks the recipe against the GPU (is_fp8_available for every recipe,
  is_mxfp8_available / is_fp8_block_scaling_available / is_nvfp4_available for those recipes), as TE's
  check_recipe_support and autocast entry do; a disabled autocast checks nothing.
- modules built under quantized_model_init (2.9+) / fp8_model_init (older) get FP8 weights.
Differences left, and why:
- it computes in fp32 on the CPU (no CUDA here), so FP8/FP4 rounding is not reproduced (accel's own
  native backend is where FP8 numerics are tested);
- the recipes' MMParams/QParams fields (GEMM split accumulators, power-of-2 scales) are left out: accel sets none;
- errors are AssertionErrors, as in TE 2.0-2.10; TE after 2.10 raises ValueError for the dims and
  RuntimeError for an unsupported recipe (accel catches neither, so tests see no change);
- MXFP8's dims error is worded by the stand-in (TE's comes from its C++ quantizer);
- no `_graph` argument and no amax reduction (one process here), no torch.compile check of
  DelayedScaling (accel does not compile TE modules);
- FP8 weights are a Parameter holding E4M3-representable values rather than a Float8Tensor (what accel
  reads and writes, quantize_/copy_/grad, behaves the same).
"""

from __future__ import annotations

import contextlib
import enum
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from pydantic.dataclasses import dataclass as pydantic_dataclass
from torch import nn

Calls = list[tuple[str, dict[str, Any]]]


def _module(name: str, **attributes: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    module.__dict__.update(attributes)
    return module


class Format(enum.Enum):
    """transformer_engine.common.recipe.Format: (max forward, max backward); E2M1 (FP4) from TE 2.8."""

    E2M1 = (6, 6)
    E4M3 = (448, 448)
    E5M2 = (57344, 57344)
    HYBRID = (448, 57344)


BACKWARD_OVERRIDES = (None, "high_precision", "dequantized")
"""TE's _BACKWARD_OVERRIDES (2.15+)."""
RECIPES_ADDED_IN = {"DelayedScaling": (0, 8), "Float8CurrentScaling": (2, 2), "MXFP8BlockScaling": (2, 0),
                    "Float8BlockScaling": (2, 3), "NVFP4BlockScaling": (2, 8)}
"""The TE release that added each recipe class (common/recipe/__init__.py across the tags)."""


def _check_backward_override(recipe: Any) -> None:
    """TE 2.15+'s __post_init__ check (an AssertionError that pydantic turns into a ValidationError)."""
    assert recipe.backward_override in BACKWARD_OVERRIDES, (
        "NVTE_BACKWARD_OVERRIDE must be unset or one of: 'high_precision', 'dequantized'.")


def _recipe_classes(version: tuple[int, ...]) -> dict[str, type]:
    """TE's recipe classes at `version` as TE declares them: pydantic dataclasses (which drop unknown keywords),
    with the fields of TE 2.18 (backward_override only from 2.15, row_scaled_activation from 2.16) and the
    asserts of their __post_init__. The MMParams/QParams fields are left out (accel sets none)."""
    override: dict[str, Any] = {"backward_override": (str | None, None)} if version >= (2, 15) else {}
    common: dict[str, Any] = {"fp8_dpa": (bool, False), "fp8_mha": (bool, False), **override}

    def post_init_delayed(self: Any) -> None:
        assert self.fp8_format != Format.E5M2, "Pure E5M2 training is not supported."
        if override:
            _check_backward_override(self)
            assert self.backward_override is None, "Delayed scaling only supports backward_override=None."

    def post_init_fp8(self: Any) -> None:
        assert self.fp8_format != Format.E5M2, "Pure E5M2 training is not supported."
        if override:
            _check_backward_override(self)

    def post_init_nvfp4(self: Any) -> None:
        assert self.fp4_format == Format.E2M1, "Only E2M1 is supported for NVFP4 scaling"
        assert self.fp8_format == Format.E4M3, "Only E4M3 is supported for NVFP4 scaling"
        if override:
            _check_backward_override(self)

    specs: dict[str, tuple[dict[str, Any], Callable[[Any], None]]] = {
        "DelayedScaling": ({"margin": (int, 0), "fp8_format": (Format, Format.HYBRID), "amax_history_len": (int, 1024),
                            "amax_compute_algo": (Any, "max"), "scaling_factor_compute_algo": (Any, None),
                            "reduce_amax": (bool, True), **common}, post_init_delayed),
        "Float8CurrentScaling": ({"use_power_2_scales": (bool, False), "fp8_format": (Format, Format.HYBRID),
                                  **common}, post_init_fp8),
        "MXFP8BlockScaling": ({"margin": (int, 0), "fp8_format": (Format, Format.E4M3), **common}, post_init_fp8),
        "Float8BlockScaling": ({"use_f32_scales": (bool, False), "fp8_format": (Format, Format.E4M3),
                                "x_block_scaling_dim": (int, 1), "w_block_scaling_dim": (int, 2),
                                "grad_block_scaling_dim": (int, 1), **common}, post_init_fp8),
        "NVFP4BlockScaling": ({"disable_rht": (bool, False), "disable_stochastic_rounding": (bool, False),
                               "disable_2d_quantization": (bool, False),
                               **({"row_scaled_activation": (bool, False)} if version >= (2, 16) else {}),
                               "fp4_format": (Format, Format.E2M1), "fp8_format": (Format, Format.E4M3), **common},
                              post_init_nvfp4),
    }
    return {name: _pydantic_recipe(name, fields, post_init) for name, (fields, post_init) in specs.items()
            if version >= RECIPES_ADDED_IN[name]}


def _pydantic_recipe(name: str, fields: dict[str, tuple[Any, Any]], post_init: Callable[[Any], None]) -> type:
    """A pydantic dataclass named `name` with `fields` (name -> (annotation, default)), as TE declares its recipes."""
    namespace = {"__annotations__": {k: v[0] for k, v in fields.items()}, "__post_init__": post_init,
                 **{k: v[1] for k, v in fields.items()}}
    return pydantic_dataclass(type(name, (), namespace))


def _recording(cls: type, state: TEState) -> type:
    """`cls` with every construction recorded as (class name, keyword arguments); keywords TE's pydantic
    recipe drops without a word are recorded in `state.dropped` (the fixture fails a test that has any)."""

    class Recorded(cls):  # type: ignore[valid-type, misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            if args:
                raise TypeError(f"{cls.__name__}: pass recipe fields by keyword")
            super().__init__(**kwargs)
            state.calls.append((cls.__name__, kwargs))
            state.dropped.extend(f"{cls.__name__}.{k}" for k in kwargs if k not in cls.__dataclass_fields__)

    Recorded.__name__ = Recorded.__qualname__ = cls.__name__
    return Recorded


@dataclass
class TEState:
    """What the stand-in TE saw: calls, and the autocast state modules ran under."""

    calls: Calls = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    """Keywords passed to a recipe that TE's pydantic recipe would drop silently (must stay empty)."""
    active: list[tuple[bool, Any]] = field(default_factory=list)
    forwards: list[tuple[str, bool, Any]] = field(default_factory=list)
    probes: dict[str, tuple[bool, str]] = field(default_factory=dict)
    """The is_*_available answers of this GPU (TE's autocast refuses a recipe the GPU cannot run)."""
    fp8_init: list[Any] = field(default_factory=list)
    """The recipes of the open quantized_model_init / fp8_model_init regions (modules built there get FP8 weights)."""
    generation: str = "autocast"
    """'autocast' (TE >= 2.9) or 'fp8_autocast' (older): decides the wording of TE's errors."""

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
            weight_class = Float8Param if state.fp8_init else nn.Parameter
            self.weight = weight_class(torch.empty(out_features, in_features, dtype=dtype, device=device))
            if bias:
                self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype, device=device))
            else:  # TE sets an empty plain tensor, not None
                self.bias = torch.Tensor().to(dtype=dtype, device=device)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            enabled, recipe = state.active[-1] if state.active else (False, None)
            state.forwards.append(("Linear", enabled, recipe))
            if enabled:
                _check_fp8_dims(state.generation, recipe, x, self.weight)
            return F.linear(x, self.weight, self.bias if self.bias.numel() else None)

        def get_extra_state(self) -> torch.Tensor:
            return torch.zeros(4, dtype=torch.uint8)  # TE pickles its FP8 metadata into a uint8 tensor

        def set_extra_state(self, value: Any) -> None:
            pass

    return Linear


def _check_fp8_dims(generation: str, recipe: Any, *tensors: torch.Tensor) -> None:
    """TE's assert_dim_for_fp8_exec(inputmat, weight) in te.Linear's forward: for each tensor the product of
    the leading dims a multiple of 8 and the last dim of 16 (the input's tokens and width, the weight's
    out_features and in_features); the message is TE >= 2.9's for the autocast generation, older TE's
    otherwise. MXFP8 scales blocks of 32 values: there both must be multiples of 32 (TE's C++ quantizer)."""
    mxfp8 = type(recipe).__name__ == "MXFP8BlockScaling"
    multiples = (32, 32) if mxfp8 else (8, 16)
    for tensor in tensors:
        leading, last = tensor.numel() // tensor.shape[-1], tensor.shape[-1]
        if not (leading % multiples[0] or last % multiples[1]):
            continue
        if generation == "autocast" and not mxfp8:
            raise AssertionError(
                "FP8 execution requires the product of all dimensions except the last to be divisible by 8 and "
                f"the last dimension to be divisible by 16, but got tensor with dims={list(tensor.size())}"
            )
        raise AssertionError(
            f"FP8 execution requires 2D input matrices with height divisible by {multiples[0]} and width divisible "
            f"by {multiples[1]}, but got tensor with dims={list(tensor.reshape(-1, last).shape)}"
        )


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


class Float8Param(nn.Parameter):
    """TE's Float8Tensor weight of a module built under quantized_model_init: only values E4M3 can hold
    (with a per-tensor scale) exist. Copying a high-precision tensor in quantizes it, as TE's does."""

    def quantize_(self, tensor: torch.Tensor, *, noop_flag: Any = None) -> Float8Param:
        with torch.no_grad():
            amax = tensor.abs().max().float().clamp(min=1e-12)
            scale = 448.0 / amax
            torch.Tensor.copy_(self, ((tensor.float() * scale).to(torch.float8_e4m3fn).float() / scale).to(self.dtype))
        return self

    def copy_(self, src: torch.Tensor, non_blocking: bool = False) -> Float8Param:  # type: ignore[override]
        return self.quantize_(src)


def _model_inits(state: TEState, generation: str) -> dict[str, Callable[..., Any]]:
    """te.quantized_model_init (TE >= 2.9) and te.fp8_model_init (2.0+, deprecated from 2.9), real keywords."""

    @contextlib.contextmanager
    def region(name: str, enabled: bool, recipe: Any, **rest: Any) -> Iterator[None]:
        state.calls.append((name, {"enabled": enabled, "recipe": recipe, **rest}))
        if enabled:
            state.fp8_init.append(recipe)
        try:
            yield
        finally:
            if enabled:
                state.fp8_init.pop()

    def quantized_model_init(enabled: bool = True, recipe: Any = None, preserve_high_precision_init_val: bool = False
                             ) -> Any:
        return region("quantized_model_init", enabled, recipe)

    def fp8_model_init(enabled: bool = True, recipe: Any = None, preserve_high_precision_init_val: bool = False) -> Any:
        if generation == "autocast":
            warnings.warn("fp8_model_init is deprecated and will be removed in a future release.", DeprecationWarning,
                          stacklevel=2)
        return region("fp8_model_init", enabled, recipe)

    if generation == "autocast":
        return {"quantized_model_init": quantized_model_init, "fp8_model_init": fp8_model_init}
    return {"fp8_model_init": fp8_model_init}


_RECIPE_PROBES = {"MXFP8BlockScaling": "is_mxfp8_available", "Float8BlockScaling": "is_fp8_block_scaling_available",
                  "NVFP4BlockScaling": "is_nvfp4_available"}


def _autocasts(state: TEState, generation: str) -> dict[str, Callable[..., Any]]:
    """te.autocast (TE >= 2.9) and te.fp8_autocast, with their real keyword names."""

    @contextlib.contextmanager
    def region(name: str, enabled: bool, recipe: Any, **rest: Any) -> Iterator[None]:
        state.calls.append((name, {"enabled": enabled, "recipe": recipe, **rest}))
        # TE's check on entering autocast (2.0-2.10: asserts): FP8 itself, then MXFP8 / block scaling
        for probe_name in ("is_fp8_available", _RECIPE_PROBES.get(type(recipe).__name__, "")):
            probe = state.probes.get(probe_name)
            if enabled and probe is not None and not probe[0]:
                raise AssertionError(probe[1])
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
        """generation 'autocast' (TE >= 2.9) or 'fp8_autocast' (older); version decides the recipe classes and
        fields (as TE has them at that release), `recipes` narrows them further; probes: is_*_available answers."""
        self.state = TEState(probes=dict(probes or {}), generation=generation)
        release = tuple(int(part) for part in version.split(".")[:2])
        classes = {name: _recording(cls, self.state) for name, cls in _recipe_classes(release).items()
                   if recipes is None or name in recipes}
        recipe = _module("transformer_engine.common.recipe", Format=Format, **classes)
        common = _module("transformer_engine.common", recipe=recipe)
        pytorch = _module("transformer_engine.pytorch", Linear=_te_linear(self.state),
                          LayerNorm=_te_layer_norm(self.state),
                          **_autocasts(self.state, generation), **_model_inits(self.state, generation))
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
