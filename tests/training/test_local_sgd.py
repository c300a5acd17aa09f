"""LocalSGD in one process (disabled, only counts) and its refused arguments; the 2-process
averaging is in distributed/two_processes/test_local_sgd.py."""

from __future__ import annotations

import pytest
import torch

from accel import Accelerator
from accel.local_sgd import LocalSGD


def test_one_process_disables_it_and_leaves_the_parameters() -> None:
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(2, 1))
    before = [p.detach().clone() for p in model.parameters()]
    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=1) as local_sgd:
        local_sgd.step()
        local_sgd.step()
    assert not local_sgd.enabled and local_sgd.num_steps == 2
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


@pytest.mark.parametrize("steps", [0, -1, 1.5, True])
def test_local_sgd_steps_must_be_a_positive_int(steps: object) -> None:
    accelerator = Accelerator(cpu=True)
    with pytest.raises(ValueError, match=rf"LocalSGD\(local_sgd_steps={steps!r}\) is not accepted"):
        LocalSGD(accelerator, torch.nn.Linear(1, 1), steps)  # type: ignore[arg-type]
