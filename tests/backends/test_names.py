"""One resolver for every precision spelling, case-insensitive, with a helpful error."""

from __future__ import annotations

import pytest

from accel.backends.names import CANONICAL_PRECISIONS, resolve_precision


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [
        ("no", "no"), ("fp32", "no"), ("32", "no"), ("32-true", "no"), (32, "no"), ("FP32", "no"),
        ("fp16", "fp16"), ("16-mixed", "fp16"), ("16", "fp16"), (16, "fp16"), ("FP16", "fp16"),
        ("bf16", "bf16"), ("bf16-mixed", "bf16"), ("BF16-Mixed", "bf16"),
        ("fp8", "fp8"), ("FP8", "fp8"),
        ("16-true", "16-true"), ("bf16-true", "bf16-true"), ("BF16-TRUE", "bf16-true"),
        ("64-true", "64-true"), ("64", "64-true"), (64, "64-true"),
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
