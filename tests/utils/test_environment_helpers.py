"""accel.utils' environment helpers: `purge_accelerate_environment`, `convert_dict_to_env_variables`,
`check_os_kernel` and `is_rocm_available`, with Accelerate's behaviour."""

from __future__ import annotations

import logging
import os
import unittest
from collections.abc import Iterator
from unittest.mock import Mock, patch

import pytest
import torch

import accel.utils.other as other
from accel.utils import (
    check_os_kernel,
    convert_dict_to_env_variables,
    is_rocm_available,
    purge_accelerate_environment,
)


@pytest.fixture
def clean_variables() -> Iterator[None]:
    names = ("ACCELERATE_X", "ACCELERATE_Y", "ACCEL_Z", "OTHER_X")
    saved = {name: os.environ.pop(name) for name in names if name in os.environ}
    yield
    for name in names:
        os.environ.pop(name, None)
    os.environ.update(saved)


def test_purge_on_a_function_restores_removes_and_leaves_others(clean_variables: None) -> None:
    os.environ["ACCELERATE_X"] = "1"
    os.environ["ACCELERATE_Y"] = "keep"

    @purge_accelerate_environment
    def sets(value: str) -> str:
        """Docstring kept."""
        os.environ["ACCELERATE_X"] = value
        del os.environ["ACCELERATE_Y"]
        os.environ["ACCEL_Z"] = "new"
        os.environ["OTHER_X"] = "stays"
        return "done"

    assert sets("2") == "done" and sets.__name__ == "sets" and sets.__doc__ == "Docstring kept."
    assert os.environ["ACCELERATE_X"] == "1" and os.environ["ACCELERATE_Y"] == "keep"
    assert "ACCEL_Z" not in os.environ and os.environ["OTHER_X"] == "stays"


def test_purge_also_restores_when_the_call_raises(clean_variables: None) -> None:
    @purge_accelerate_environment
    def fails() -> None:
        os.environ["ACCELERATE_X"] = "set"
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fails()
    assert "ACCELERATE_X" not in os.environ


def test_purge_on_a_class_wraps_test_methods_and_subclasses(clean_variables: None) -> None:
    @purge_accelerate_environment
    class Base:
        def setUp(self) -> None:
            os.environ["ACCELERATE_Y"] = "from setUp"

        def test_a(self) -> str:
            os.environ["ACCELERATE_X"] = "a"
            return os.environ["ACCELERATE_Y"]

        @staticmethod
        def test_static() -> None:
            os.environ["ACCEL_Z"] = "static"

        def helper(self) -> None:
            os.environ["ACCELERATE_X"] = "helper"

    class Child(Base):
        def test_b(self) -> None:
            os.environ["ACCELERATE_X"] = "b"

    child = Child()
    child.setUp()  # setUp is not wrapped: what it sets is there for the test, as in Accelerate
    assert child.test_a() == "from setUp" and "ACCELERATE_X" not in os.environ
    assert os.environ["ACCELERATE_Y"] == "from setUp"
    child.test_b()
    Child.test_static()
    assert "ACCELERATE_X" not in os.environ and "ACCEL_Z" not in os.environ
    assert Child.test_a is Base.test_a  # an inherited test is wrapped once, not again
    child.helper()  # not a test: not wrapped
    assert os.environ["ACCELERATE_X"] == "helper"


def test_purge_keeps_a_subclass_hook_and_unittest_skips(clean_variables: None) -> None:
    seen: list[str] = []

    @purge_accelerate_environment
    class Case(unittest.TestCase):
        def __init_subclass__(cls, **kwargs: object) -> None:
            super().__init_subclass__(**kwargs)
            seen.append(cls.__name__)

        def test_sets(self) -> None:
            os.environ["ACCELERATE_X"] = "1"

        @unittest.skip("always skipped")
        def test_skipped(self) -> None:
            raise AssertionError("ran")

    class Sub(Case):
        pass

    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(Sub).run(result)
    assert seen == ["Sub"] and result.testsRun == 2 and len(result.skipped) == 1 and result.wasSuccessful()
    assert "ACCELERATE_X" not in os.environ


def test_convert_dict_to_env_variables_skips_unsafe_items(caplog: pytest.LogCaptureFixture) -> None:
    env = {"ACCELERATE_DEBUG_MODE": "1", "BAD_ENV_NAME": "<mything", "OTHER_ENV": "2", "EMPTY": "",
           "SPACE": "a b", "SEMI": "x;rm"}
    with caplog.at_level(logging.WARNING, logger="accelerate.utils.environment"):
        lines = convert_dict_to_env_variables(env)
    assert lines == ["ACCELERATE_DEBUG_MODE=1\n", "OTHER_ENV=2\n"]
    assert len(caplog.records) == 4 and "Skipping BAD_ENV_NAME=<mything" in caplog.records[0].getMessage()


@pytest.mark.parametrize(
    ("system", "release", "warns"),
    [("Linux", "5.15.0-35-generic", False), ("Darwin", "5.4.0", False), ("Linux", "5.4.0-35-generic", True),
     ("Linux", "4.19.112+", True), ("Linux", "unknown", False)],
)
def test_check_os_kernel(system: str, release: str, warns: bool, caplog: pytest.LogCaptureFixture) -> None:
    with patch("platform.uname", return_value=Mock(release=release, system=system)):
        with caplog.at_level(logging.WARNING):
            check_os_kernel()
    assert len(caplog.records) == int(warns)
    if warns:
        message = caplog.records[0].getMessage()
        assert release.split("-")[0].rstrip("+") in message and "5.5.0" in message
    assert other.check_os_kernel is check_os_kernel


def test_is_rocm_available_follows_torch_hip() -> None:
    with patch.object(torch.version, "hip", None):
        assert is_rocm_available() is False
    with patch.object(torch.version, "hip", "6.0"), patch("torch.cuda.is_available", return_value=True):
        assert is_rocm_available() is True
