"""The `ao` FP8 backend under FSDP2: weights all-gathered in FP8, their scales computed once per step.

With tensorwise scaling (`scaling='current'`), torchao's `enable_fsdp_float8_all_gather` wraps each
Float8Linear weight in a tensor subclass whose shard FSDP2 casts to FP8 before the all-gather, so
the weights travel in 8 bits instead of 16 or 32 (as torchtitan runs it). The cast needs the
weight's amax over all shards: `precompute_float8_dynamic_scale_for_fsdp` computes every weight's
in one all-reduce after each optimizer step; without a precomputed scale (the first step, after
loading weights) each all-gather reduces its own weight's amax. torchao's rowwise recipes have
no FP8 all-gather: their weights are gathered in the base precision and cast per GEMM.

Measured on CPU with gloo (torch 2.13, torchao 0.18): the FP8 all-gather, the precomputed scales
and training run there as on CUDA.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

FP8_ALL_GATHER_MODE = (
    "weights all-gathered in FP8 (torchao's enable_fsdp_float8_all_gather), their scales precomputed in one "
    "all-reduce after each optimizer step; evaluation runs in FP8 too"
)


def high_precision_all_gather_mode(scaling: str) -> str:
    """What runs under FSDP2 for a scaling without torchao's FP8 all-gather."""
    return (
        f"weights all-gathered in the base precision and cast to FP8 per GEMM (torchao's FP8 all-gather runs "
        f"tensorwise scaling only, not {scaling!r})"
    )


EVAL_IN_FP8_WARNING = (
    "FSDP with FP8RecipeKwargs(backend='ao'): the weights are all-gathered in FP8, so evaluation (model.eval()) "
    "runs the FP8 GEMMs too; torchao cannot compute in high precision from FP8-gathered weights. Set "
    "FP8RecipeKwargs(use_autocast_during_eval=True) to say you want this (and silence this warning), or use "
    "scaling='rowwise', which gathers the weights in high precision."
)

EVAL_IN_FP8_REFUSAL = (
    "FP8RecipeKwargs(use_autocast_during_eval=False) cannot be honoured by backend='ao' under FSDP: with "
    "tensorwise scaling torchao all-gathers the weights in FP8 (enable_fsdp_float8_all_gather), and cannot run "
    "high-precision GEMMs from them in eval mode. Leave use_autocast_during_eval out (evaluation then runs in "
    "FP8), or use scaling='rowwise', which gathers the weights in high precision."
)


def fp8_gathered_models(models: Sequence[nn.Module]) -> list[nn.Module]:
    """The models among `models` holding a weight that FSDP2 all-gathers in FP8."""
    return [model for model in models if any(_gathered_in_fp8(m) for m in model.modules())]


def precompute_scales(models: Sequence[nn.Module]) -> None:
    """After an optimizer step: every FP8-gathered weight's scale, in one all-reduce per model."""
    from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

    for model in models:
        precompute_float8_dynamic_scale_for_fsdp(model)


def forget_scales(models: Sequence[nn.Module]) -> None:
    """Drop the precomputed scales (weights loaded from elsewhere): the next all-gathers reduce their own."""
    for model in models:
        for module in model.modules():
            if _gathered_in_fp8(module):
                module.weight._local_tensor._precomputed_scale = None  # type: ignore[union-attr]  # a DTensor, as checked


def _gathered_in_fp8(module: nn.Module) -> bool:
    from torch.distributed.tensor import DTensor
    from torchao.float8.fsdp_utils import WeightWithDynamicFloat8CastTensor

    weight = getattr(module, "weight", None)
    return isinstance(weight, DTensor) and isinstance(weight._local_tensor, WeightWithDynamicFloat8CastTensor)
