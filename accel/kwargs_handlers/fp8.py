"""FP8RecipeKwargs: one FP8 recipe that means the same thing on every FP8 backend."""

from __future__ import annotations

import functools
from typing import Any

from accel._validation import check_bool, check_choice, check_int
from accel.kwargs_handlers.base import KwargsHandler, kwargs_handler

FP8_BACKENDS = ("auto", "te", "msamp", "ao", "native")
FP8_FORMATS = ("HYBRID", "E4M3")
AMAX_COMPUTE_ALGOS = ("max", "most_recent")
SCALINGS = ("delayed", "current", "rowwise", "rowwise_with_gw_hp", "mxfp8", "block", "nvfp4")
BACKWARD_OVERRIDES = ("high_precision", "dequantized")
OPTIMIZATION_LEVELS = ("O1", "O2")
BASE_PRECISIONS = ("bf16", "fp16", "fp32", "bf16-true", "16-true")
"""What runs outside the FP8 GEMMs: bf16/fp16 mixed (fp32 weights, torch.autocast; fp16 with a loss
scaler), fp32, or true 16-bit weights (Lightning's "transformer-engine" / "-float16")."""

ACCELERATE_SPELLINGS = {
    "opt_level": "optimization_level",
    "amax_history_length": "amax_history_len",
    "amax_compute_algorithm": "amax_compute_algo",
}


@kwargs_handler(aliases=ACCELERATE_SPELLINGS)
class FP8RecipeKwargs(KwargsHandler):
    """The FP8 recipe. Defaults are TransformerEngine's: FP8 in the GEMMs, parameters left as they are.

    This class checks values only. Whether the chosen backend can run here, and honour every
    field that was set explicitly, is checked by the Accelerator when it is built.
    Accelerate's spellings are accepted: `opt_level`, `amax_history_length`,
    `amax_compute_algorithm`, and upper-case backend names.
    """

    backend: str = "auto"
    """te, msamp, ao or native; auto picks the first that can run here."""
    fp8_format: str = "HYBRID"
    """HYBRID (E4M3 forward, E5M2 gradients) or E4M3 everywhere."""
    margin: int = 0
    """scale = (fp8_max / amax) / 2**margin."""
    amax_history_len: int = 1024
    """Length of the amax history window used by delayed scaling."""
    amax_compute_algo: str = "max"
    """max (over the history) or most_recent."""
    scaling: str | None = None
    """delayed, current, rowwise, rowwise_with_gw_hp, mxfp8, block or nvfp4; None is the backend's default."""
    backward_override: str | None = None
    """TransformerEngine's backward precision (TE 2.15+, every recipe but delayed): None (the recipe's own),
    high_precision (backward GEMMs on the saved high-precision operands) or dequantized (on the quantized
    operands dequantized to the compute dtype)."""
    optimization_level: str | None = None
    """MS-AMP's storage level: O1 (float16 weights, FP8 weight gradients) or O2 (also FP8/float16 Adam
    moments). None (default): the backend's own default: on native, parameters, gradients and optimizer
    state stay as the base precision keeps them (TransformerEngine's default; the FP8 casts happen in the
    GEMMs); on msamp, MS-AMP's own O1."""
    use_autocast_during_eval: bool = False
    """Run FP8 in eval mode too (by default evaluation runs in high precision)."""
    exclude_modules: tuple[str, ...] = ()
    """fnmatch patterns of qualified module names kept in high precision."""
    small_layer_dim: int | None = None
    """Linear layers whose in_features or out_features is at most this stay in the base precision (too
    small to gain from FP8); 0 converts every eligible layer. None: 1024 (2048 for rowwise) where the
    FP8 products run on a GPU, 0 on the CPU (accel.backends.fp8.small_layers)."""
    base_precision: str = "bf16"
    """What runs outside the FP8 GEMMs: bf16 (mixed, as Accelerate and NeMo), fp16 (mixed, with a loss
    scaler), fp32, or bf16-true / 16-true (16-bit weights, as Lightning's transformer-engine)."""
    fp8_params: bool = False
    """Store the converted layers' weights in FP8, the high-precision master copy with the optimizer
    (NeMo's fp8_params, TransformerEngine's fp8_model_init / quantized_model_init)."""
    health_interval: int = 0
    """Every this many optimizer steps, log per-layer FP8 health (amax, scale, saturated and underflowed
    fractions) to the active trackers, with a summary line; 0 (default) is off and costs nothing."""

    def __post_init__(self) -> None:
        self._normalise("backend", check_choice("FP8RecipeKwargs.backend", self.backend, FP8_BACKENDS))
        self._normalise("fp8_format", _check_format(self.fp8_format))
        check_int("FP8RecipeKwargs.margin", self.margin, minimum=0)
        check_int("FP8RecipeKwargs.amax_history_len", self.amax_history_len, minimum=1)
        self._normalise(
            "amax_compute_algo",
            check_choice("FP8RecipeKwargs.amax_compute_algo", self.amax_compute_algo, AMAX_COMPUTE_ALGOS),
        )
        if self.scaling is not None:
            self._normalise("scaling", check_choice("FP8RecipeKwargs.scaling", self.scaling, SCALINGS))
        if self.backward_override is not None:
            self._normalise(
                "backward_override",
                check_choice("FP8RecipeKwargs.backward_override", self.backward_override, BACKWARD_OVERRIDES),
            )
        if self.optimization_level is not None:
            self._normalise(
                "optimization_level",
                check_choice("FP8RecipeKwargs.optimization_level", self.optimization_level, OPTIMIZATION_LEVELS),
            )
        check_bool("FP8RecipeKwargs.use_autocast_during_eval", self.use_autocast_during_eval)
        self._normalise("exclude_modules", _check_patterns(self.exclude_modules))
        if self.small_layer_dim is not None:
            check_int("FP8RecipeKwargs.small_layer_dim", self.small_layer_dim, minimum=0)
        self._normalise(
            "base_precision", check_choice("FP8RecipeKwargs.base_precision", self.base_precision, BASE_PRECISIONS)
        )
        check_bool("FP8RecipeKwargs.fp8_params", self.fp8_params)
        check_int("FP8RecipeKwargs.health_interval", self.health_interval, minimum=0)

    def with_fields(self, **fields: object) -> FP8RecipeKwargs:
        """This recipe with `fields` set as if the caller had given them (they join `explicit_fields`).

        Args:
            **fields: Field names and values, checked as at construction.

        Returns:
            A new FP8RecipeKwargs (the handlers are frozen).
        """
        given = {name: getattr(self, name) for name in self.explicit_fields}
        return FP8RecipeKwargs(**{**given, **fields})

    def _normalise(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)


def _check_format(value: object) -> str:
    if isinstance(value, str) and value.upper() == "E5M2":
        raise ValueError(
            "FP8RecipeKwargs.fp8_format='E5M2' is not supported: pure E5M2 training loses too much "
            "precision in the forward pass (TransformerEngine refuses it too). Use 'HYBRID' "
            "(E4M3 forward, E5M2 gradients) or 'E4M3'."
        )
    return check_choice("FP8RecipeKwargs.fp8_format", value, FP8_FORMATS)


def _check_patterns(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        raise TypeError(
            f"FP8RecipeKwargs.exclude_modules={value!r} must be a list or tuple of patterns, "
            f"not one string; write exclude_modules=[{value!r}]."
        )
    if not isinstance(value, (list, tuple)) or not all(isinstance(p, str) for p in value):
        raise TypeError(
            f"FP8RecipeKwargs.exclude_modules={value!r} must be a list or tuple of strings "
            "(fnmatch patterns of qualified module names, such as 'lm_head' or 'blocks.*.attn.*')."
        )
    return tuple(value)


# Accelerate's TERecipeKwargs/FP8RecipeKwargs fields that are not accel fields: mapped where they
# mean something here, refused with the reason where they do not (never silently dropped).
def _accelerate_te_fields(kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` with Accelerate's `use_mxfp8_block_scaling`, `interval` and `override_linear_precision` resolved."""
    kwargs = dict(kwargs)
    if "use_mxfp8_block_scaling" in kwargs:
        mxfp8 = check_bool("FP8RecipeKwargs.use_mxfp8_block_scaling", kwargs.pop("use_mxfp8_block_scaling"))
        if mxfp8 and kwargs.get("scaling", "mxfp8") not in ("mxfp8", None):
            raise ValueError(
                f"FP8RecipeKwargs(use_mxfp8_block_scaling=True, scaling={kwargs['scaling']!r}) asks for two "
                "scalings; use_mxfp8_block_scaling=True is Accelerate's spelling of scaling='mxfp8'. Give one."
            )
        if mxfp8:
            kwargs["scaling"] = "mxfp8"
    if "interval" in kwargs and kwargs.pop("interval") != 1:
        raise ValueError(
            "FP8RecipeKwargs(interval=...) other than 1 cannot run: TransformerEngine never used DelayedScaling's "
            "interval in PyTorch (TE issue #805) and removed it in 2.2; scales are updated after every step. "
            "Remove interval (1 is what runs)."
        )
    if "override_linear_precision" in kwargs:
        override = kwargs.pop("override_linear_precision")
        if not isinstance(override, (tuple, list)) or len(override) != 3 or any(map(bool, override)):
            raise ValueError(
                f"FP8RecipeKwargs(override_linear_precision={override!r}) cannot run: TransformerEngine removed it "
                "in 2.0 (it kept the forward, input-gradient or weight-gradient GEMM in high precision for all "
                "layers). Only (False, False, False) is accepted; keep whole layers in high precision with "
                "exclude_modules, or use backend='ao' with scaling='rowwise_with_gw_hp' for a high-precision "
                "weight-gradient GEMM."
            )
    return kwargs


_decorated_init = FP8RecipeKwargs.__init__


@functools.wraps(_decorated_init)
def _init_with_accelerate_fields(self: FP8RecipeKwargs, **kwargs: Any) -> None:
    _decorated_init(self, **_accelerate_te_fields(kwargs))


FP8RecipeKwargs.__init__ = _init_with_accelerate_fields  # type: ignore[method-assign]  # wrapped on purpose
