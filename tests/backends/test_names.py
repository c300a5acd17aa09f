"""One resolver for every precision spelling, case-insensitive, with a helpful error."""

from __future__ import annotations

import pytest

from accel.backends.names import (
    CANONICAL_PRECISIONS,
    RECIPE_PRECISIONS,
    canonical_precision,
    implied_recipe,
    reads_fp8_recipe,
    resolve_precision,
)


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [
        ("no", "no"), ("fp32", "no"), ("32", "no"), ("32-true", "no"), (32, "no"), ("FP32", "no"),
        ("fp16", "fp16"), ("16-mixed", "fp16"), ("16", "fp16"), (16, "fp16"), ("FP16", "fp16"),
        ("bf16", "bf16"), ("bf16-mixed", "bf16"), ("BF16-Mixed", "bf16"),
        ("fp8", "fp8"), ("FP8", "fp8"),
        ("16-true", "16-true"), ("bf16-true", "bf16-true"), ("BF16-TRUE", "bf16-true"),
        ("64-true", "64-true"), ("64", "64-true"), (64, "64-true"),
        # surrounding spaces are ignored; ints are Lightning's precision=16/32/64 (16: fp16 mixed, as Lightning)
        (" bf16 ", "bf16"), ("\tfp8\n", "fp8"), (" 16", "fp16"),
    ],
)
def test_every_spelling_resolves(spelling: object, canonical: str) -> None:
    assert resolve_precision(spelling) == canonical


@pytest.mark.parametrize("bad", ["fp4", "bfloat16", "", None, True, 8, 16.0])
def test_unknown_precision_lists_accepted_values(bad: object) -> None:
    with pytest.raises(ValueError, match=r"mixed_precision=.* is not accepted; accepted values: 'no', 'fp32'"):
        resolve_precision(bad)


def test_error_suggests_closest_match() -> None:
    with pytest.raises(ValueError, match="Did you mean 'bf16'"):
        resolve_precision("bf61")


def test_canonical_names_resolve_to_themselves() -> None:
    for name in CANONICAL_PRECISIONS:
        assert resolve_precision(name) == name


@pytest.mark.parametrize(
    ("spelling", "name", "recipe"),
    [
        ("transformer-engine", "transformer-engine", {"backend": "te", "base_precision": "bf16-true"}),
        ("Transformer-Engine-Float16 ", "transformer-engine-float16", {"backend": "te", "base_precision": "16-true"}),
        ("bf16_with_fp8_mixed", "bf16_with_fp8_mixed", {"base_precision": "bf16"}),
        ("FP16_with_FP8_mixed", "fp16_with_fp8_mixed", {"base_precision": "fp16"}),
    ],
)
def test_lightning_and_nemo_fp8_names_keep_their_recipe(spelling: str, name: str, recipe: dict[str, str]) -> None:
    """Such a name stays itself through the resolver (and so through config files and launch), runs fp8."""
    assert resolve_precision(spelling) == name
    assert canonical_precision(name) == "fp8" and reads_fp8_recipe(name)
    assert dict(implied_recipe(name)) == recipe


def test_other_names_imply_no_recipe() -> None:
    for name in CANONICAL_PRECISIONS:
        assert canonical_precision(name) == name and not implied_recipe(name)
        assert reads_fp8_recipe(name) == (name == "fp8")


def test_implied_recipes_are_valid_fp8_recipes() -> None:
    from accel import FP8RecipeKwargs

    for fields in RECIPE_PRECISIONS.values():
        assert FP8RecipeKwargs(**fields).explicit_fields == set(fields)
