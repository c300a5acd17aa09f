"""The small-layer filter: which Linear layers are too small to gain from FP8, on every FP8 backend.

An FP8 layer does more than a high-precision one around its matrix products: it measures and
casts its input, its weight and its output gradient to FP8 (memory-bound passes over M*K, K*N
and M*N values), and then runs three products that are about twice as fast on FP8 tensor
cores. The products' saving grows with M*K*N, the casts with M*(K+N), so for a layer of
in_features K and out_features N the gain depends on 1/K + 1/N: on the smaller of the two.
Below a size the casts cost more than the products save and the layer is slower in FP8 than
in bf16 (torchao measured rowwise about 40% slower than bf16 on small layers; its and
torchtitan's `auto_filter_small_kn` leave such layers out).

accel's rule, the same on every backend: a Linear layer runs in FP8 only when both K and N are
larger than ``small_layer_dim``; the others stay in the base precision, each listed in the
conversion report with the reason. ``FP8RecipeKwargs(small_layer_dim=...)`` sets the limit (0
turns the filter off); left at None, the limit is accel's default for the scaling where the FP8
products run on a GPU (DEFAULT_SMALL_LAYER_DIM), and 0 where they run on the CPU: there FP8 is
computed by upcasting (docs/fp8.md), no layer gains speed from it, and it runs for its numerics,
which a filter would change.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

DEFAULT_SMALL_LAYER_DIM: dict[str, int] = {
    "delayed": 1024,
    "current": 1024,
    "block": 1024,
    "mxfp8": 1024,
    "rowwise": 2048,
    "rowwise_with_gw_hp": 2048,
}
"""Per scaling: the default limit on an FP8 GPU. From torchao's auto-filter tables (H100, torchao
0.18 `_auto_filter_for_recipe`), made one number: per-tensor scaling leaves layers with K <= 4096
and N <= 1024 out, rowwise those with N <= 2048 or K <= 1024 (and N <= 4096 with K <= 2048); accel
leaves out min(K, N) <= 1024 and <= 2048. Both give the same choice on Llama-3-8B (wk and wv,
4096 -> 1024, stay out). Block, MXFP8 and other scalings take the per-tensor limit (not measured)."""
FALLBACK_SMALL_LAYER_DIM = 1024
"""The limit for a scaling not in DEFAULT_SMALL_LAYER_DIM (one added later, such as nvfp4)."""


@dataclass(frozen=True)
class SmallLayerRule:
    """Layers with in_features or out_features at most ``limit`` stay out of FP8; ``origin`` says
    where the limit came from (for the report). A limit of 0 filters nothing."""

    limit: int
    origin: str

    def reason(self, in_features: int, out_features: int) -> str:
        """Why a layer of these widths stays out of FP8, or "" when it is large enough.

        Example: SmallLayerRule(1024, "...").reason(64, 4096) starts "K=64, N=4096: min(K, N) = 64 <= small_layer_dim 1024".
        """
        smaller = min(in_features, out_features)
        if smaller > self.limit:
            return ""
        return (
            f"K={in_features}, N={out_features}: min(K, N) = {smaller} <= small_layer_dim {self.limit}, too small to "
            "gain from FP8 (its casts cost more than the faster products save); small_layer_dim=0 converts it"
        )

    def describe(self) -> str:
        """One phrase for the report's summary: the filter's limit and where it comes from."""
        if self.limit == 0:
            return f"small-layer filter off ({self.origin})"
        return f"small-layer filter: min(K, N) <= {self.limit} stays in the base precision ({self.origin})"


def small_layer_rule(small_layer_dim: int | None, scaling: str, device: torch.device) -> SmallLayerRule:
    """The rule a backend applies: the recipe's ``small_layer_dim``, or the default for `scaling` on `device`.

    Example: small_layer_rule(None, "rowwise", torch.device("cuda")).limit == 2048.
    """
    if small_layer_dim is not None:
        return SmallLayerRule(small_layer_dim, "as set by small_layer_dim")
    if device.type != "cuda":
        return SmallLayerRule(
            0, f"the default on {device.type}: FP8 products are emulated there and no layer gains speed; "
            "set small_layer_dim to filter as on a GPU"
        )
    limit = DEFAULT_SMALL_LAYER_DIM.get(scaling, FALLBACK_SMALL_LAYER_DIM)
    return SmallLayerRule(limit, f"accel's default for {scaling} scaling on a GPU")
