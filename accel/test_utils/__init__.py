"""`accel.test_utils`: the helpers of Accelerate's `accelerate.test_utils` that users' test suites import
(skip decorators, `AccelerateTestCase`, `RegressionDataset`/`RegressionModel`, subprocess helpers), at the
same names. Accelerate's own test scripts (`accelerate.test_utils.test_script`, ...) are Accelerate's
tests of itself and are not part of accel.

The modules: testing.py (`accelerate.test_utils.testing`: skip and `require_*` decorators, test-case
bases, subprocess helpers, assertions) and training.py (`accelerate.test_utils.training`: the toy
`RegressionDataset` and `RegressionModel`, with Accelerate's numbers).
"""

from __future__ import annotations

from typing import Any

from accel.test_utils import testing
from accel.test_utils.testing import (
    DEFAULT_LAUNCH_COMMAND,
    AccelerateTestCase,
    MockingTestCase,
    TempDirTestCase,
    are_the_same_tensors,
    assert_exception,
    capture_call_output,
    device_count,
    execute_subprocess_async,
    get_launch_command,
    get_torch_dist_unique_port,
    memory_allocated_func,
    path_in_accelerate_package,
    pytest_xdist_worker_id,
    require_torch_min_version,
    run_first,
    skip,
    slow,
    torch_device,
)
from accel.test_utils.training import RegressionDataset, RegressionModel


def __getattr__(name: str) -> Any:
    """The `require_<what>` decorators of accel.test_utils.testing."""
    return getattr(testing, name)


__all__ = [
    "DEFAULT_LAUNCH_COMMAND", "AccelerateTestCase", "MockingTestCase", "RegressionDataset", "RegressionModel",
    "TempDirTestCase", "are_the_same_tensors", "assert_exception", "capture_call_output", "device_count",
    "execute_subprocess_async", "get_launch_command", "get_torch_dist_unique_port", "memory_allocated_func",
    "path_in_accelerate_package", "pytest_xdist_worker_id", "require_torch_min_version", "run_first", "skip", "slow",
    "torch_device", *testing._requirements,
]
