"""Test helpers at Accelerate's path `accelerate.test_utils.testing`: skip decorators, test-case bases,
subprocess helpers, assertions. Users' test suites import them; under accel they mean the same,
with accel's launcher (`accel launch`) where Accelerate's names `accelerate launch`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch

from accel.utils.imports import (
    is_bnb_available,
    is_cuda_available,
    is_datasets_available,
    is_fp8_available,
    is_fp16_available,
    is_hpu_available,
    is_mps_available,
    is_npu_available,
    is_peft_available,
    is_torch_version,
    is_torch_xla_available,
    is_torchao_available,
    is_torchdata_stateful_dataloader_available,
    is_transformer_engine_available,
    is_transformers_available,
    is_xpu_available,
)

T = TypeVar("T")


def _backend() -> tuple[str, int, Callable[[], int]]:
    """(device type, device count, allocated-memory function) of the accelerator this process would use."""
    if is_cuda_available():
        return "cuda", torch.cuda.device_count(), torch.cuda.memory_allocated
    if is_xpu_available():
        return "xpu", torch.xpu.device_count(), torch.xpu.memory_allocated
    if is_mps_available():
        return "mps", 1, torch.mps.current_allocated_memory
    return "cpu", 1, lambda: 0


torch_device, device_count, memory_allocated_func = _backend()


def get_launch_command(**kwargs: Any) -> list[str]:
    """`["accel", "launch", "--name=value", ...]`: True flags become `--name`, None and False are left out.

    Example:
        >>> get_launch_command(num_processes=2, cpu=True)
        ['accel', 'launch', '--num_processes=2', '--cpu']
    """
    command = ["accel", "launch"]
    for name, value in kwargs.items():
        if value is True:
            command.append(f"--{name}")
        elif value is not None and value is not False:
            command.append(f"--{name}={value}")
    return command


DEFAULT_LAUNCH_COMMAND = get_launch_command(num_processes=device_count)


def parse_flag_from_env(key: str, default: bool = False) -> bool:
    """`$key` read as a yes/no flag (1/0, true/false, yes/no, on/off), else `default`."""
    value = os.environ.get(key)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "y", "on", "t"):
        return True
    if lowered in ("0", "false", "no", "n", "off", "f"):
        return False
    raise ValueError(f"${key}={value!r}: if set, {key} must be yes or no.")


_run_slow_tests = parse_flag_from_env("RUN_SLOW", default=False)


def _skip_unless(condition: bool, reason: str) -> Callable[[T], T]:
    return unittest.skipUnless(condition, reason)  # type: ignore[return-value]  # typeshed's _FT is bound to callables; tests are


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def skip(test_case: T) -> T:
    """Skip the test unconditionally."""
    return _skip_unless(False, "Test was skipped")(test_case)


def slow(test_case: T) -> T:
    """Run the test only when $RUN_SLOW is set to a true value."""
    return _skip_unless(_run_slow_tests, "test is slow")(test_case)


_multi = device_count > 1 and torch_device != "cpu"
_requirements: dict[str, tuple[bool, str]] = {
    "require_cpu": (torch_device == "cpu", "test requires only a CPU"),
    "require_non_cpu": (torch_device != "cpu", "test requires a hardware accelerator"),
    "require_cuda": (is_cuda_available() and not is_torch_xla_available(), "test requires a GPU"),
    "require_cuda_or_hpu": (is_cuda_available() or is_hpu_available(), "test requires a CUDA GPU or HPU"),
    "require_cuda_or_xpu": (is_cuda_available() or is_xpu_available(), "test requires a CUDA GPU or XPU"),
    "require_xpu": (is_xpu_available(), "test requires a XPU"),
    "require_non_xpu": (torch_device != "xpu", "test requires a non-XPU"),
    "require_non_hpu": (torch_device != "hpu", "test requires a non-HPU"),
    "require_mps": (is_mps_available(), "test requires a `mps` backend support in `torch`"),
    "require_npu": (is_npu_available(), "test requires a NPU"),
    "require_mlu": (False, "test requires a MLU (accel does not run on MLU)"),
    "require_musa": (False, "test requires a MUSA (accel does not run on MUSA)"),
    "require_sdaa": (False, "test requires a SDAA (accel does not run on SDAA)"),
    "require_tpu": (False, "test requires TPU (accel does not run on XLA)"),
    "require_non_torch_xla": (not is_torch_xla_available(), "test requires an env without TorchXLA"),
    "require_fp16": (is_fp16_available(), "test requires a device that supports fp16"),
    "require_fp8": (is_fp8_available(), "test requires FP8 support"),
    "require_huggingface_suite": (is_transformers_available() and is_datasets_available(),
                                  "test requires the Hugging Face suite"),
    "require_datasets": (is_datasets_available(), "test requires the datasets library"),
    "require_transformers": (is_transformers_available(), "test requires the transformers library"),
    "require_peft": (is_peft_available(), "test requires PEFT"),
    "require_timm": (_installed("timm"), "test requires the timm library"),
    "require_torchvision": (_installed("torchvision"), "test requires the torchvision library"),
    "require_triton": (_installed("triton"), "test requires the triton library"),
    "require_schedulefree": (_installed("schedulefree"), "test requires the schedulefree library"),
    "require_bnb": (is_bnb_available(), "test requires the bitsandbytes library"),
    "require_torchao": (is_torchao_available(), "test requires torchao"),
    "require_transformer_engine": (is_transformer_engine_available(), "test requires transformers engine"),
    "require_transformer_engine_mxfp8": (False, "test requires transformers engine MXFP8 block scaling"),
    "require_deepspeed": (False, "test requires DeepSpeed (accel does not run DeepSpeed)"),
    "require_pippy": (False, "test requires pippy (accel does not run pipeline parallelism)"),
    "require_tensorboard": (_installed("tensorboard"), "test requires Tensorboard"),
    "require_wandb": (_installed("wandb"), "test requires wandb"),
    "require_comet_ml": (_installed("comet_ml"), "test requires comet_ml"),
    "require_aim": (_installed("aim"), "test requires aim"),
    "require_clearml": (_installed("clearml"), "test requires clearml"),
    "require_dvclive": (_installed("dvclive"), "test requires dvclive"),
    "require_mlflow": (_installed("mlflow"), "test requires mlflow"),
    "require_pandas": (_installed("pandas"), "test requires pandas"),
    "require_matplotlib": (_installed("matplotlib"), "test requires matplotlib"),
    "require_swanlab": (_installed("swanlab"), "test requires swanlab"),
    "require_trackio": (_installed("trackio"), "test requires trackio"),
    "require_import_timer": (_installed("import_timer"), "test requires tuna interpreter"),
    "require_fsdp2": (True, "test requires FSDP2"),
    "require_tp": (False, "test requires tensor parallelism (accel does not run it)"),
    "require_trackers": (any(_installed(name) for name in ("wandb", "tensorboard", "mlflow", "aim", "clearml", "dvclive"))
                         and not _installed("comet_ml"),
                         "test requires at least one tracker to be available and for `comet_ml` to not be installed"),
    "require_torchdata_stateful_dataloader": (is_torchdata_stateful_dataloader_available(),
                                              "test requires torchdata.stateful_dataloader"),
    "require_single_device": (torch_device != "cpu" and device_count == 1, "test requires a hardware accelerator"),
    "require_single_gpu": (is_cuda_available() and torch.cuda.device_count() == 1, "test requires a GPU"),
    "require_single_xpu": (is_xpu_available() and device_count == 1, "test requires a XPU"),
    "require_multi_device": (_multi, "test requires multiple hardware accelerators"),
    "require_multi_gpu": (is_cuda_available() and torch.cuda.device_count() > 1, "test requires multiple GPUs"),
    "require_multi_xpu": (is_xpu_available() and device_count > 1, "test requires multiple XPUs"),
    "require_multi_gpu_or_xpu": (_multi and torch_device in ("cuda", "xpu"), "test requires multiple GPUs or XPUs"),
}
"""Each `require_<what>` decorator: (whether its tests run here, the reason given when they are skipped)."""


def _requirement(name: str) -> Callable[[T], T]:
    runs, reason = _requirements[name]

    def decorator(test_case: T) -> T:
        return _skip_unless(runs, reason)(test_case)

    decorator.__name__ = decorator.__qualname__ = name
    decorator.__doc__ = f"Skip the test unless it can run here ({reason})."
    return decorator


def require_torch_min_version(test_case: Any = None, version: str | None = None) -> Any:
    """Skip the test unless torch is at least `version`; also usable as `@require_torch_min_version(version="2.4")`."""
    if version is None:
        raise ValueError("require_torch_min_version(version=None): give the torch version the test needs, e.g. '2.4'.")
    if test_case is None:
        return lambda case: require_torch_min_version(case, version=version)
    return _skip_unless(is_torch_version(">=", version), f"test requires torch version >= {version}")(test_case)


def run_first(test_case: T) -> T:
    """Mark the test to run first when the pytest-order plugin is installed (`pytest.mark.order(1)`)."""
    if _installed("pytest"):
        import pytest

        return pytest.mark.order(1)(test_case)  # type: ignore[return-value]  # a MarkDecorator applied to a test returns the test
    return test_case


class TempDirTestCase(unittest.TestCase):
    """One temporary folder, `self.tmpdir`, for the whole class; emptied before each test (unless
    `clear_on_setup` is False) and removed after the last."""

    clear_on_setup = True
    tmpdir: Path

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmpdir = Path(tempfile.mkdtemp())

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.tmpdir, ignore_errors=True)

    def setUp(self) -> None:
        if self.clear_on_setup:
            for path in self.tmpdir.iterdir():
                shutil.rmtree(path) if path.is_dir() else path.unlink()


class AccelerateTestCase(unittest.TestCase):
    """Resets the process's accelerator state after every test (`AcceleratorState._reset_state(True)`,
    `GradientState._reset_state()`), so that no test sees the one before it."""

    def tearDown(self) -> None:
        from accel.state import AcceleratorState, GradientState

        super().tearDown()
        AcceleratorState._reset_state(True)
        GradientState._reset_state()


class MockingTestCase(unittest.TestCase):
    """Call `self.add_mocks(mock_or_mocks)` at the end of `setUp`: each is started and stopped after the test."""

    def add_mocks(self, mocks: Any) -> None:
        self.mocks = list(mocks) if isinstance(mocks, (tuple, list)) else [mocks]
        for patcher in self.mocks:
            patcher.start()
            self.addCleanup(patcher.stop)


def are_the_same_tensors(tensor: torch.Tensor) -> bool:
    """True when every process holds a tensor equal to this process's `tensor`."""
    from accel.state import PartialState
    from accel.utils import gather

    here = tensor[None].clone().to(PartialState().device)
    everyone = gather(here).cpu()
    return all(torch.equal(row, here[0].cpu()) for row in everyone)


class _RunOutput:
    """What `execute_subprocess_async` returns: the exit status and the output, as lists of lines."""

    def __init__(self, returncode: int, stdout: list[str], stderr: list[str]) -> None:
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


def execute_subprocess_async(cmd: Sequence[Any], env: dict[str, str] | None = None, stdin: Any = None,
                             timeout: float = 180, quiet: bool = False, echo: bool = True) -> _RunOutput:
    """Run `cmd` (paths allowed), echoing its output unless `quiet`; raise RuntimeError with its
    stderr when it exits with a non-zero status."""
    command = [str(part) for part in cmd]
    if echo:
        print("\nRunning: ", " ".join(command))
    done = subprocess.run(command, env=env, stdin=stdin, capture_output=True, text=True, timeout=timeout)
    out, err = done.stdout.splitlines(), done.stderr.splitlines()
    if not quiet:
        for line in out:
            print("stdout:", line)
        for line in err:
            print("stderr:", line, file=sys.stderr)
    if done.returncode > 0:
        raise RuntimeError(f"'{' '.join(command)}' failed with returncode {done.returncode}\n\n"
                           "The combined stderr from workers follows:\n" + "\n".join(err))
    return _RunOutput(done.returncode, out, err)


def pytest_xdist_worker_id() -> int:
    """This pytest-xdist worker's number (0 without xdist)."""
    return int(re.sub(r"^gw", "", os.environ.get("PYTEST_XDIST_WORKER", "gw0")))


def get_torch_dist_unique_port() -> int:
    """A rendezvous port per pytest-xdist worker (29500 + the worker's number)."""
    return 29500 + pytest_xdist_worker_id()


class SubprocessCallException(Exception):
    """A command run by `run_command` failed; the message holds its output."""


def run_command(command: list[Any], return_stdout: bool = False, env: dict[str, str] | None = None) -> str | None:
    """Run `command`; return its output when `return_stdout`; raise SubprocessCallException with the output on failure."""
    command = [str(part) for part in command]
    try:
        output = subprocess.check_output(command, stderr=subprocess.STDOUT, env=env or os.environ.copy())
    except subprocess.CalledProcessError as error:
        raise SubprocessCallException(
            f"Command `{' '.join(command)}` failed with the following error:\n\n{error.output.decode()}"
        ) from error
    return output.decode("utf-8") if return_stdout else None


def path_in_accelerate_package(*components: str) -> Path:
    """A path inside the installed accel package (Accelerate's helper names its own package)."""
    return Path(__file__).resolve().parents[1].joinpath(*components)


@contextlib.contextmanager
def assert_exception(exception_class: type[BaseException], msg: str | None = None) -> Iterator[None]:
    """Assert that the block raises `exception_class` (with `msg` in its message, when given).

    Example:
        >>> with assert_exception(ValueError, "bad"):
        ...     raise ValueError("a bad value")
    """
    try:
        yield
    except Exception as error:
        assert isinstance(error, exception_class), f"Expected exception of type {exception_class} but got {type(error)}"
        if msg is not None:
            assert msg in str(error), f"Expected message '{msg}' to be in exception but got '{error}'"
        return
    raise AssertionError(f"Expected exception of type {exception_class} but ran without issue.")


def capture_call_output(func: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """What `func(*args, **kwargs)` prints to stdout."""
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        func(*args, **kwargs)
    return captured.getvalue()


def __getattr__(name: str) -> Any:
    if name in _requirements:
        value = _requirement(name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_LAUNCH_COMMAND", "AccelerateTestCase", "MockingTestCase", "SubprocessCallException", "TempDirTestCase",
    "are_the_same_tensors", "assert_exception", "capture_call_output", "device_count", "execute_subprocess_async",
    "get_launch_command", "get_torch_dist_unique_port", "memory_allocated_func", "parse_flag_from_env",
    "path_in_accelerate_package", "pytest_xdist_worker_id", "require_torch_min_version", "run_command", "run_first",
    "skip", "slow", "torch_device", *_requirements,
]
