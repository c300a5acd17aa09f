"""Importing torchao without the start-up lines that say nothing about the run.

`import torchao` logs, on every machine where its prebuilt GPU kernels cannot load (any machine
without the CUDA version it was built for, this CPU included), one "Failed to load .../_C_*.so"
line per library, and torch logs a deprecation line for each Enum torchao registers with pytree.
They leaked into `accel bench` and every fp8 run with backend "ao". Only those two kinds of line
are held back, and only while torchao imports; anything else torchao or torch logs is shown.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType


class _StartUpNoise(logging.Filter):
    """Drops torchao's failed-kernel-library lines and torch's Enum-registration deprecation lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        kernel_library = message.startswith("Failed to load ") and ".so" in message
        enum_registration = "is an Enum subclass and is now natively supported by torch.compile" in message
        triton = message.startswith("Warning: Detected no triton")  # torchao.kernel.intmm, on a machine without it
        return not (kernel_library or enum_registration or triton)


_LOGGERS = ("torchao", "torchao.kernel.intmm", "torch.utils._pytree")


@contextmanager
def torchao_noise_held_back() -> Iterator[None]:
    """While inside: torchao's failed-kernel-library lines and torch's Enum-registration lines are dropped
    (transformers imports torchao's submodules as it builds a model, where torchao is installed)."""
    noise = _StartUpNoise()
    loggers = [logging.getLogger(name) for name in _LOGGERS]
    for logger in loggers:
        logger.addFilter(noise)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(noise)


def import_torchao() -> ModuleType:
    """`import torchao` with its start-up noise held back; call it before importing from torchao.

    >>> torchao = import_torchao()  # doctest: +SKIP
    >>> from torchao.float8 import convert_to_float8_training  # doctest: +SKIP
    """
    if "torchao" in sys.modules:
        return sys.modules["torchao"]
    with torchao_noise_held_back():
        return importlib.import_module("torchao")
