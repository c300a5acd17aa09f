"""accel's native FP8: per-tensor scaled FP8 GEMMs in plain PyTorch (``torch._scaled_mm``).

Runs wherever torch runs, CPU included. The numerics follow TransformerEngine's
delayed-scaling recipe (amax history, margin, HYBRID/E4M3 formats). Around the GEMMs: MS-AMP's
O1/O2 storage levels, FP8 weights between steps, and fused CPU kernels for the hot path.

The modules, by job:

* the layers: linear.py (`Float8Linear`: an nn.Linear whose three GEMMs run in FP8), conv1d.py
  (`Float8Conv1D`, for transformers' Conv1D), functions.py (their autograd functions), compiled.py
  (the layer as two custom operators, for ``torch.compile(fullgraph=True)``), convert.py (a model's
  linear layers swapped and swapped back; its state dicts and FP8 scaling state);
* formats and scaling: formats.py (E4M3, E5M2 and the cast into them), scaling.py (`TensorScaler`:
  one tensor's delayed or current scaling state), scaler_group.py (`ScalerGroup`: all of a model's
  scalers, updated once per step);
* the GEMMs: gemm.py (``torch._scaled_mm`` off the CPU, exact upcasts on it), cpu_gemm.py (the CPU's
  FP8 products, from exact bf16 or float32 upcasts), cpu_quantize.py (quantizing straight to the CPU
  operand);
* fused CPU kernels: fused.py (one compiled loop for the quantize and gradient hot path),
  fused_adam.py (O2's Adam step in one kernel), fused_o1_adam.py (O1's step for torch's Adam and
  AdamW in one kernel), kernel_math.py (the bit-exact rounding arithmetic they trace);
* MS-AMP's optimization levels: levels.py (`O1`, `O2`: what the optimizer step does), compact.py
  (a converted layer's 16-bit parameters with FP8 gradients, per layer and per optimizer),
  weights.py (`HalfWeight`: a parameter stored in float16), grads.py (`FP8Gradient`: a gradient held
  in FP8), rounding.py (power-of-two scales, stochastic rounding, fast FP8 upcasts), adam.py (O2's
  Adam/AdamW with an FP8 first moment), optimizer_state.py (an optimizer state loaded without torch
  casting it), scaled_step.py (the step as torch's GradScaler sees it), data_parallel.py (DDP's work
  for those parameters, across processes);
* FP8 weights (`fp8_params`): fp8_weight.py (the weight kept in FP8 between optimizer steps),
  fsdp_weight.py (under FSDP2: FP8 shards, all-gathered in FP8).
"""

from typing import TYPE_CHECKING

from accel._lazy import lazy_exports

if TYPE_CHECKING:  # the lazy names, for type checkers (accel/_lazy.py)
    from accel.backends.native_fp8.conv1d import Float8Conv1D as Float8Conv1D
    from accel.backends.native_fp8.convert import ConversionReport as ConversionReport
    from accel.backends.native_fp8.convert import LayerDecision as LayerDecision
    from accel.backends.native_fp8.convert import convert_linears as convert_linears
    from accel.backends.native_fp8.convert import float8_layers as float8_layers
    from accel.backends.native_fp8.convert import fp8_state_dict as fp8_state_dict
    from accel.backends.native_fp8.convert import high_precision_state_dict as high_precision_state_dict
    from accel.backends.native_fp8.convert import load_fp8_state_dict as load_fp8_state_dict
    from accel.backends.native_fp8.convert import set_fp8_enabled as set_fp8_enabled
    from accel.backends.native_fp8.convert import unconvert_linears as unconvert_linears
    from accel.backends.native_fp8.formats import E4M3 as E4M3
    from accel.backends.native_fp8.formats import E5M2 as E5M2
    from accel.backends.native_fp8.formats import cast_to_fp8 as cast_to_fp8
    from accel.backends.native_fp8.formats import format_dtypes as format_dtypes
    from accel.backends.native_fp8.formats import fp8_max as fp8_max
    from accel.backends.native_fp8.linear import Float8Config as Float8Config
    from accel.backends.native_fp8.linear import Float8Linear as Float8Linear
    from accel.backends.native_fp8.scaler_group import ScalerGroup as ScalerGroup
    from accel.backends.native_fp8.scaling import TensorScaler as TensorScaler
    from accel.backends.native_fp8.scaling import compute_scale as compute_scale

_EXPORTS = {
    "Float8Conv1D": "accel.backends.native_fp8.conv1d",
    "ConversionReport": "accel.backends.native_fp8.convert",
    "LayerDecision": "accel.backends.native_fp8.convert",
    "convert_linears": "accel.backends.native_fp8.convert",
    "float8_layers": "accel.backends.native_fp8.convert",
    "fp8_state_dict": "accel.backends.native_fp8.convert",
    "high_precision_state_dict": "accel.backends.native_fp8.convert",
    "load_fp8_state_dict": "accel.backends.native_fp8.convert",
    "set_fp8_enabled": "accel.backends.native_fp8.convert",
    "unconvert_linears": "accel.backends.native_fp8.convert",
    "E4M3": "accel.backends.native_fp8.formats",
    "E5M2": "accel.backends.native_fp8.formats",
    "cast_to_fp8": "accel.backends.native_fp8.formats",
    "format_dtypes": "accel.backends.native_fp8.formats",
    "fp8_max": "accel.backends.native_fp8.formats",
    "Float8Config": "accel.backends.native_fp8.linear",
    "Float8Linear": "accel.backends.native_fp8.linear",
    "ScalerGroup": "accel.backends.native_fp8.scaler_group",
    "TensorScaler": "accel.backends.native_fp8.scaling",
    "compute_scale": "accel.backends.native_fp8.scaling",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
