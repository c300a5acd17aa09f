"""accel's native FP8: per-tensor scaled FP8 GEMMs in plain PyTorch (``torch._scaled_mm``).

Runs wherever torch runs, CPU included. The numerics follow TransformerEngine's
delayed-scaling recipe (amax history, margin, HYBRID/E4M3 formats).
"""

from accel.backends.native_fp8.conv1d import Float8Conv1D
from accel.backends.native_fp8.convert import (
    ConversionReport,
    LayerDecision,
    convert_linears,
    float8_layers,
    fp8_state_dict,
    high_precision_state_dict,
    load_fp8_state_dict,
    scaler_group,
    set_fp8_enabled,
    unconvert_linears,
)
from accel.backends.native_fp8.formats import E4M3, E5M2, cast_to_fp8, format_dtypes, fp8_max
from accel.backends.native_fp8.linear import Float8Config, Float8Linear
from accel.backends.native_fp8.scaler_group import ScalerGroup
from accel.backends.native_fp8.scaling import TensorScaler, compute_scale

__all__ = [
    "E4M3",
    "E5M2",
    "ConversionReport",
    "Float8Config",
    "Float8Conv1D",
    "Float8Linear",
    "LayerDecision",
    "ScalerGroup",
    "TensorScaler",
    "cast_to_fp8",
    "compute_scale",
    "convert_linears",
    "float8_layers",
    "format_dtypes",
    "fp8_max",
    "fp8_state_dict",
    "high_precision_state_dict",
    "load_fp8_state_dict",
    "scaler_group",
    "set_fp8_enabled",
    "unconvert_linears",
]
