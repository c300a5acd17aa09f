"""Memory helpers from Accelerate: `release_memory`, and `find_executable_batch_size`, which retries a
function with a smaller batch size after an out-of-memory error."""

from __future__ import annotations

import functools
import gc
import inspect
from collections.abc import Callable
from typing import Any

import torch

_OUT_OF_MEMORY_MESSAGES = (
    " out of memory.",  # CUDA, HIP, XPU
    "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.",  # cuDNN's answer to a batch too large
    "DefaultCPUAllocator: can't allocate memory",  # the CPU
    "FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed",  # HPU
    "MPS backend out of memory",  # Apple's MPS
)


def clear_device_cache(garbage_collection: bool = False) -> None:
    """Release the cached blocks of the accelerator's allocator (and run the garbage collector first if asked)."""
    if garbage_collection:
        gc.collect()
    if torch.accelerator.is_available():
        torch.accelerator.empty_cache()


def release_memory(*objects: Any) -> list[None]:
    """A list of as many Nones as `objects`, after a garbage collection and emptying the device cache.

    Assign the result back so that the references go: `a, b = release_memory(a, b)`.
    """
    released: list[None] = [None] * len(objects)
    del objects
    clear_device_cache(garbage_collection=True)
    return released


def should_reduce_batch_size(exception: BaseException) -> bool:
    """True when `exception` is an out-of-memory error (CUDA, XPU, MPS, CPU, HPU) or cuDNN's refusal of a too large batch."""
    if isinstance(exception, torch.OutOfMemoryError):
        return True
    if isinstance(exception, RuntimeError) and len(exception.args) == 1 and isinstance(exception.args[0], str):
        return any(message in exception.args[0] for message in _OUT_OF_MEMORY_MESSAGES)
    return False


def find_executable_batch_size(
    function: Callable[..., Any] | None = None,
    starting_batch_size: int = 128,
    reduce_batch_size_fn: Callable[[], int] | None = None,
) -> Any:
    """Decorator: call `function(batch_size, *args, **kwargs)` from `starting_batch_size`; after an
    out-of-memory error, free memory and retry with a smaller batch size, 90% of the previous one
    (or what `reduce_batch_size_fn()` returns), until it runs. The caller leaves out `batch_size`.

    Raises RuntimeError ("No executable batch size found, reached zero.") when a call would run with
    batch size 0 (a `starting_batch_size` of 0 included, as in Accelerate). The size reached is kept
    for later calls. Works the same on the CPU, where torch reports "DefaultCPUAllocator: can't
    allocate memory".

    Example:
        >>> @find_executable_batch_size(starting_batch_size=64)
        ... def train(batch_size, model):
        ...     return batch_size
        >>> train("model")
        64
    """
    if function is None:
        return functools.partial(
            find_executable_batch_size,
            starting_batch_size=starting_batch_size,
            reduce_batch_size_fn=reduce_batch_size_fn,
        )
    if isinstance(starting_batch_size, bool) or not isinstance(starting_batch_size, int) or starting_batch_size < 0:
        raise ValueError(
            f"find_executable_batch_size(starting_batch_size={starting_batch_size!r}): give an int >= 1, the batch "
            "size to try first."
        )
    if reduce_batch_size_fn is not None and not callable(reduce_batch_size_fn):
        raise TypeError(
            f"find_executable_batch_size(reduce_batch_size_fn={reduce_batch_size_fn!r}): give a function taking no "
            "argument that returns the next batch size, or None for 90% of the previous one."
        )
    batch_size = starting_batch_size

    def reduce_by_a_tenth() -> int:
        return int(batch_size * 0.9)

    reduce = reduce_batch_size_fn or reduce_by_a_tenth

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        nonlocal batch_size
        _check_batch_size_not_given(function, args)
        clear_device_cache(garbage_collection=True)
        while True:
            if batch_size <= 0 and starting_batch_size == 0:
                raise RuntimeError(
                    f"No executable batch size found, reached zero. {function.__name__} was decorated with "
                    "find_executable_batch_size(starting_batch_size=0): there is no batch size to try; give the "
                    "batch size to try first (an int >= 1)."
                )
            if batch_size <= 0:
                raise RuntimeError(
                    f"No executable batch size found, reached zero. {function.__name__} ran out of memory at every "
                    f"batch size from {starting_batch_size} down (find_executable_batch_size); start from a "
                    "smaller model or sequence length, or a larger device."
                )
            try:
                return function(batch_size, *args, **kwargs)
            except Exception as error:
                if not should_reduce_batch_size(error):
                    raise
                del error  # its traceback holds the frames, and with them the memory, of the failed try
                clear_device_cache(garbage_collection=True)
                batch_size = reduce()

    return run


def _check_batch_size_not_given(function: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """Raise TypeError when the caller passed the batch size too (the decorator passes it)."""
    parameters = list(inspect.signature(function).parameters)
    if len(parameters) < len(args) + 1:
        given = ", ".join(f"{name}={value!r}" for name, value in zip(parameters[1:], args[1:]))
        raise TypeError(
            f"Batch size was passed into `{function.__name__}` as the first argument when called; "
            f"find_executable_batch_size passes it. Call `{function.__name__}({given})` instead."
        )
