"""The precision vocabulary: one resolver for accel's, Lightning's and NeMo's spellings.

Torch-free, so that the command line can validate a precision without importing torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from accel._validation import choice_error

CANONICAL_PRECISIONS: dict[str, tuple[str, ...]] = {
    "no": ("fp32", "32", "32-true"),
    "fp16": ("16-mixed", "16"),
    "bf16": ("bf16-mixed",),
    "fp8": (),
    "16-true": (),
    "bf16-true": (),
    "64-true": ("64",),
}
"""Canonical name -> the other spellings accepted for it (case-insensitive)."""

RECIPE_PRECISIONS: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {
        # Lightning's TransformerEnginePrecision: TE layers, weights (and inputs) in bf16 / fp16.
        "transformer-engine": MappingProxyType({"backend": "te", "base_precision": "bf16-true"}),
        "transformer-engine-float16": MappingProxyType({"backend": "te", "base_precision": "16-true"}),
        # NeMo's recipes: FP8 GEMMs, everything else bf16 / fp16 mixed (fp16 with loss scaling).
        "bf16_with_fp8_mixed": MappingProxyType({"base_precision": "bf16"}),
        "fp16_with_fp8_mixed": MappingProxyType({"base_precision": "fp16"}),
    }
)
"""Other frameworks' names for FP8 with particular recipe fields: name -> FP8RecipeKwargs fields.

They run mixed_precision='fp8' with these fields set, as if given in FP8RecipeKwargs. The
resolver keeps such a name as it is (it does not become 'fp8'), so that its fields travel with
it through config files and `accel launch` to the FP8 backend."""

FP8_PRECISION = "fp8"

_LOOKUP = {
    **{spelling: canonical for canonical, others in CANONICAL_PRECISIONS.items() for spelling in (canonical, *others)},
    **{name: name for name in RECIPE_PRECISIONS},
}


def resolve_precision(value: object, argument: str = "mixed_precision") -> str:
    """The precision `value` names: its canonical name, or a name in RECIPE_PRECISIONS as it is.

    Accepted: any spelling above in any case, with surrounding spaces ignored, and the ints
    16, 32 and 64 (Lightning's `precision=16`: fp16 mixed; 32: fp32; 64: 64-true).
    """
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str) and value.strip().lower() in _LOOKUP:
        return _LOOKUP[value.strip().lower()]
    raise choice_error(argument, value, list(_LOOKUP))


def canonical_precision(name: str) -> str:
    """The canonical precision a resolved name runs: 'fp8' for a RECIPE_PRECISIONS name, else itself."""
    return FP8_PRECISION if name in RECIPE_PRECISIONS else name


def implied_recipe(name: str) -> Mapping[str, str]:
    """The FP8RecipeKwargs fields a resolved precision name sets (empty for all but RECIPE_PRECISIONS)."""
    return RECIPE_PRECISIONS.get(name, MappingProxyType({}))


def reads_fp8_recipe(name: str) -> bool:
    """Whether a resolved precision name runs FP8, and so reads the FP8 recipe (fp8_config, --fp8_*)."""
    return canonical_precision(name) == FP8_PRECISION


LOSS_SCALED = frozenset({"fp16"})
"""Precisions that train with a dynamic loss scaler (torch's GradScaler, DeepSpeed's fp16): its found-inf
flags are all-reduced each step (accel.estimate counts them)."""


def loss_scaled(name: str) -> bool:
    """Whether precision `name` trains with a dynamic loss scaler (see LOSS_SCALED)."""
    return name in LOSS_SCALED
