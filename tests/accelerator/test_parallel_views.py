"""`accelerator.maybe_context_parallel` (accel/accelerator/parallel_views.py): the region Accelerate's long-context
examples enter every step. With cp_size 1 the region changes nothing: the buffers stay whole and the step computes
what it computes outside; cp_size > 1 runs on CUDA only (tests/parallel/test_context_parallel.py) and is refused on a
CPU when the Accelerator is built. The ranks of
each mesh dimension are checked with real processes in tests/parallel/test_mesh_training.py."""

from __future__ import annotations

import pytest
import torch

from accel import Accelerator, ParallelismConfig


def test_the_region_leaves_the_buffers_whole_and_the_step_unchanged() -> None:
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = accelerator.prepare(torch.nn.Linear(4, 2))
    inputs = torch.randn(1, 6, 4)
    positions = torch.arange(6).unsqueeze(0)
    outside = model(inputs)
    with accelerator.maybe_context_parallel(buffers=[inputs, positions], buffer_seq_dims=[1, 1],
                                            no_restore_buffers={inputs}):
        assert inputs.shape == (1, 6, 4) and positions.shape == (1, 6)  # not sharded along the sequence
        inside = model(inputs)
        accelerator.backward(inside.sum())
    assert torch.equal(inside, outside)
    assert model.weight.grad is not None and inputs.shape == (1, 6, 4)


def test_the_region_needs_no_arguments_and_lets_errors_through() -> None:
    accelerator = Accelerator(cpu=True)
    with accelerator.maybe_context_parallel():
        pass
    with pytest.raises(KeyError), accelerator.maybe_context_parallel():
        raise KeyError("raised inside")


def test_context_parallelism_on_a_cpu_is_refused_at_construction_naming_cp_size_and_sp_size() -> None:
    config = ParallelismConfig(cp_size=2)  # torch-free: the device decides, when the Accelerator is built
    with pytest.raises(NotImplementedError, match=r"cp_size=2.* on cpu: context parallelism \(cp_size > 1\) runs on "
                                                  r"CUDA only.*Use sp_size instead"):
        Accelerator(cpu=True, parallelism_config=config)
