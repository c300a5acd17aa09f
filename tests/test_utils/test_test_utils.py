"""accel.test_utils: Accelerate's test helpers at the same names, with Accelerate's numbers."""

from __future__ import annotations

import unittest

import numpy as np
import pytest
import torch

from accel import test_utils
from accel.test_utils import RegressionDataset, RegressionModel, assert_exception, get_launch_command


def test_regression_data_and_model_are_accelerates() -> None:
    from accelerate.test_utils import RegressionDataset as TheirDataset
    from accelerate.test_utils import RegressionModel as TheirModel

    ours, theirs = RegressionDataset(a=1, b=2, length=16, seed=42), TheirDataset(a=1, b=2, length=16, seed=42)
    assert len(ours) == 16 and np.array_equal(ours.x, theirs.x) and np.array_equal(ours.y, theirs.y)
    assert ours[3] == theirs[3]
    x = torch.arange(4.0)
    assert torch.equal(RegressionModel(a=2, b=1)(x), TheirModel(a=2, b=1)(x))
    assert [n for n, _ in RegressionModel().named_parameters()] == ["a", "b"]


def test_assert_exception_checks_the_class_and_the_message() -> None:
    with assert_exception(ValueError, "bad"):
        raise ValueError("a bad value")
    with pytest.raises(AssertionError, match="ran without issue"), assert_exception(ValueError):
        pass
    with pytest.raises(AssertionError, match="Expected exception of type"), assert_exception(ValueError):
        raise KeyError("x")


def test_launch_command_and_decorators() -> None:
    assert get_launch_command(num_processes=2, cpu=True, debug=False, config_file=None) == [
        "accel", "launch", "--num_processes=2", "--cpu"]
    assert test_utils.torch_device in ("cpu", "cuda", "xpu", "mps")

    class Case(unittest.TestCase):
        @test_utils.require_tpu
        def test_tpu(self) -> None:
            raise AssertionError("never runs: accel has no TPU")

        @test_utils.require_cpu
        def test_cpu(self) -> None:
            pass

    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(Case).run(result)
    assert [reason for _, reason in result.skipped][:1] == ["test requires TPU (accel does not run on XLA)"]
    assert result.wasSuccessful()
    with pytest.raises(AttributeError):
        test_utils.require_something_unknown  # noqa: B018


def test_accelerate_test_case_resets_the_state() -> None:
    from accel import Accelerator
    from accel.state import is_initialized

    class Case(test_utils.AccelerateTestCase):
        def test_builds(self) -> None:
            self.accelerator = Accelerator(cpu=True)

    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(Case).run(result)
    assert result.wasSuccessful() and not is_initialized()
