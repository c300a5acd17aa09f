"""find_executable_batch_size retries smaller after out-of-memory errors; release_memory lets objects go."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from accel.training.out_of_memory import find_executable_batch_size, release_memory, should_reduce_batch_size

CPU_OOM = "[enforce fail at alloc_cpu.cpp:118] DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes."


def test_the_batch_size_shrinks_by_a_tenth_until_it_fits() -> None:
    tried: list[int] = []

    @find_executable_batch_size(starting_batch_size=128)
    def train(batch_size: int, scale: int) -> int:
        tried.append(batch_size)
        if batch_size > 100:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if batch_size > 95:
            raise RuntimeError(CPU_OOM)
        return batch_size * scale

    assert train(2) == 92 * 2
    assert tried == [128, 115, 103, 92]
    assert train(1) == 92  # the size found is kept for the next call


def test_a_custom_reduction_and_torchs_out_of_memory_error() -> None:
    tried: list[int] = []

    def halve() -> int:
        return tried[-1] // 2

    @find_executable_batch_size(starting_batch_size=64, reduce_batch_size_fn=halve)
    def train(batch_size: int) -> int:
        tried.append(batch_size)
        if batch_size > 16:
            raise torch.OutOfMemoryError("out of memory")
        return batch_size

    assert train() == 16 and tried == [64, 32, 16]


def test_other_errors_pass_through_and_zero_raises() -> None:
    @find_executable_batch_size(starting_batch_size=4)
    def broken(batch_size: int) -> None:
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        broken()

    @find_executable_batch_size(starting_batch_size=3)
    def never(batch_size: int) -> None:
        raise RuntimeError(CPU_OOM)

    with pytest.raises(RuntimeError, match="No executable batch size found, reached zero"):
        never()


def test_passing_the_batch_size_too_is_refused() -> None:
    @find_executable_batch_size(starting_batch_size=8)
    def train(batch_size: int, lr: float) -> float:
        return lr

    with pytest.raises(TypeError, match="Batch size was passed into `train` as the first argument"):
        train(8, 0.1)


def test_should_reduce_batch_size_recognises_out_of_memory_messages() -> None:
    assert should_reduce_batch_size(RuntimeError("CUDA out of memory. Tried to allocate"))
    assert should_reduce_batch_size(RuntimeError(CPU_OOM))
    assert should_reduce_batch_size(RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED."))
    assert not should_reduce_batch_size(RuntimeError("out of range"))
    assert not should_reduce_batch_size(ValueError("CUDA out of memory."))


def test_release_memory_returns_nones_and_drops_its_references() -> None:
    tensor = torch.ones(1000)
    ref = weakref.ref(tensor)
    tensor, other = release_memory(tensor, [1])
    gc.collect()
    assert (tensor, other) == (None, None) and ref() is None


def test_starting_at_zero_raises_at_the_call_as_in_accelerate() -> None:
    calls: list[int] = []

    @find_executable_batch_size(starting_batch_size=0)
    def train(batch_size: int) -> None:
        calls.append(batch_size)

    with pytest.raises(RuntimeError, match=r"^No executable batch size found, reached zero\. .*starting_batch_size=0"):
        train()
    assert calls == []


def test_bad_arguments_are_refused_at_decoration() -> None:
    with pytest.raises(ValueError, match=r"starting_batch_size=-1"):
        find_executable_batch_size(lambda batch_size: None, starting_batch_size=-1)
    with pytest.raises(TypeError, match=r"reduce_batch_size_fn=3"):
        find_executable_batch_size(lambda batch_size: None, reduce_batch_size_fn=3)  # type: ignore[arg-type]


def test_the_sizes_tried_are_accelerates() -> None:
    from accelerate.utils.memory import find_executable_batch_size as accelerate_version

    def sizes(decorator: object) -> list[int]:
        tried: list[int] = []

        def train(batch_size: int) -> None:
            tried.append(batch_size)
            if batch_size != 8:
                raise RuntimeError("MPS backend out of memory (MPS allocated: 1 GiB)")

        decorator(train, starting_batch_size=20)()  # type: ignore[operator]
        return tried

    ours = sizes(find_executable_batch_size)
    assert ours == sizes(accelerate_version) == [20, 18, 16, 14, 12, 10, 9, 8]
