"""The examples in accel/estimate's docstrings (what the API reference shows) give what they say."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("module", ["accel.estimate.training", "accel.estimate.activations", "accel.estimate.measure",
                                    "accel.estimate.layout", "accel.estimate.plan", "accel.estimate.per_rank"])
def test_docstring_examples(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0
    assert result.attempted >= (0 if module.endswith("measure") else 1)
