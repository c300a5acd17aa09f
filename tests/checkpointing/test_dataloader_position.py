"""PreparedDataLoader's position: after load_state_dict the next iteration continues the saved
epoch at the next batch, in the same shuffled order, and leaves the RNG as it found it."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from accel.data.loader import PreparedDataLoader
from accel.training.gradient_state import GradientState

CPU = torch.device("cpu")
DATA = TensorDataset(torch.arange(20))


def _prepared(**options: Any) -> tuple[PreparedDataLoader, GradientState]:
    gradients = GradientState(1)
    return PreparedDataLoader(DataLoader(DATA, batch_size=3, **options), CPU, gradients, place=False), gradients


def _ids(batch: list[torch.Tensor]) -> list[int]:
    return batch[0].tolist()


def _interrupted(k: int, **options: Any) -> tuple[dict[str, Any], torch.Tensor, list[list[int]], list[list[int]]]:
    """Take k batches, record (position, RNG state); return them with the rest of the epoch and the next epoch."""
    loader, _ = _prepared(**options)
    batches = iter(loader)
    for _ in range(k):
        next(batches)
    state, rng = loader.state_dict(), torch.get_rng_state()
    rest = [_ids(batch) for batch in batches]
    return state, rng, rest, [_ids(batch) for batch in loader]


@pytest.mark.parametrize(
    "options",
    [
        {"shuffle": True},
        {"shuffle": True, "generator": "seeded"},
        {"shuffle": False},
        {"shuffle": True, "num_workers": 2},
    ],
    ids=["global-rng", "own-generator", "in-order", "workers"],
)
def test_resuming_continues_at_the_next_batch_in_the_same_order(options: dict[str, Any]) -> None:
    def built() -> dict[str, Any]:
        return {**options, "generator": torch.Generator().manual_seed(7)} if "generator" in options else options

    torch.manual_seed(0)
    state, rng, rest, next_epoch = _interrupted(3, **built())
    torch.manual_seed(123)  # a new process: its RNG is whatever, until load_state restores it
    loader, _ = _prepared(**built())
    loader.load_state_dict(state)
    torch.set_rng_state(rng)
    assert [_ids(batch) for batch in loader] == rest
    assert [_ids(batch) for batch in loader] == next_epoch


def test_replaying_the_epoch_leaves_the_global_rng_untouched() -> None:
    torch.manual_seed(0)
    state, rng, _, _ = _interrupted(2, shuffle=True)
    loader, _ = _prepared(shuffle=True)
    loader.load_state_dict(state)
    torch.set_rng_state(rng)
    next(iter(loader))
    assert torch.equal(torch.get_rng_state(), rng)


def test_the_last_batch_of_a_resumed_epoch_is_still_marked() -> None:
    torch.manual_seed(0)
    state, rng, rest, _ = _interrupted(2, shuffle=True)
    loader, gradients = _prepared(shuffle=True)
    loader.load_state_dict(state)
    torch.set_rng_state(rng)
    ends = [gradients.end_of_dataloader for _ in loader]
    assert ends == [False] * (len(rest) - 1) + [True]
    assert gradients.end_of_dataloader is False


def test_a_position_at_the_end_of_an_epoch_resumes_with_the_next_epoch() -> None:
    """The batch after the epoch's last one is the next epoch's first (no empty pass in between)."""
    torch.manual_seed(0)
    state, rng, rest, next_epoch = _interrupted(7, shuffle=True)  # 20 samples in batches of 3: 7 batches
    assert rest == [] and state["batch"] == 7
    loader, _ = _prepared(shuffle=True)
    loader.load_state_dict(state)
    torch.set_rng_state(rng)
    assert [_ids(batch) for batch in loader] == next_epoch
    assert loader.state_dict()["epoch"] == 2


def test_positions_between_epochs_and_after_a_break() -> None:
    loader, _ = _prepared(shuffle=True)
    assert loader.state_dict() == {"epoch": 0, "batch": 0, "rng": None}
    list(loader)
    assert loader.state_dict() == {"epoch": 1, "batch": 0, "rng": None}
    for index, _ in enumerate(loader):
        if index == 1:
            assert loader.state_dict()["batch"] == 2 and loader.state_dict()["epoch"] == 1
            break
    # the loop was left: the next iteration starts a new epoch, so that is the position
    assert loader.state_dict() == {"epoch": 2, "batch": 0, "rng": None}


def test_a_peek_during_an_epoch_does_not_lose_its_position() -> None:
    loader, _ = _prepared(shuffle=True)
    batches = iter(loader)
    next(batches)
    next(batches)
    next(iter(loader))  # someone looks at one batch of a new pass, and drops it
    assert (loader.state_dict()["epoch"], loader.state_dict()["batch"]) == (0, 2)


def test_a_loaded_position_is_reported_until_it_is_used() -> None:
    torch.manual_seed(0)
    state, _, _, _ = _interrupted(2, shuffle=True)
    loader, _ = _prepared(shuffle=True)
    loader.load_state_dict(state)
    assert loader.state_dict()["batch"] == 2


def test_a_shorter_dataloader_is_reported() -> None:
    torch.manual_seed(0)
    state, _, _, _ = _interrupted(5, shuffle=True)
    short = PreparedDataLoader(DataLoader(TensorDataset(torch.arange(9)), batch_size=3), CPU, GradientState(1), False)
    short.load_state_dict(state)
    with pytest.raises(ValueError, match="position is batch 5 of epoch 0, but this DataLoader ended before it"):
        list(short)


def test_bad_positions_are_refused() -> None:
    loader, _ = _prepared(shuffle=True)
    with pytest.raises(ValueError, match="expected the dict state_dict\\(\\) returns"):
        loader.load_state_dict({"batch": 1})
    with pytest.raises(ValueError, match="must be ints >= 0"):
        loader.load_state_dict({"epoch": -1, "batch": 0, "rng": None})
    torch.manual_seed(0)
    state, _, _, _ = _interrupted(1, shuffle=True)
    seeded, _ = _prepared(shuffle=True, generator=torch.Generator())
    with pytest.raises(ValueError, match="taken with 0 torch.Generator.*this DataLoader has 1"):
        seeded.load_state_dict(state)


def test_the_wrapper_still_behaves_like_the_loader() -> None:
    loader, _ = _prepared(shuffle=False)
    assert len(loader) == 7
    assert loader.batch_size == 3
    assert [_ids(batch) for batch in loader][0] == [0, 1, 2]


class _Augmented(torch.utils.data.Dataset):
    """Each sample gets noise drawn from the process's (in a worker: the worker's) torch RNG."""

    def __len__(self) -> int:
        return 20

    def __getitem__(self, index: int) -> torch.Tensor:
        return index + torch.rand(())


def test_random_augmentation_in_workers_is_reproduced() -> None:
    def prepared() -> PreparedDataLoader:
        loader = DataLoader(_Augmented(), batch_size=3, shuffle=True, num_workers=2)
        return PreparedDataLoader(loader, CPU, GradientState(1), place=False)

    torch.manual_seed(0)
    loader = prepared()
    batches = iter(loader)
    next(batches)
    state, rng = loader.state_dict(), torch.get_rng_state()
    rest = [batch.tolist() for batch in batches]
    resumed = prepared()
    resumed.load_state_dict(state)
    torch.set_rng_state(rng)
    assert [batch.tolist() for batch in resumed] == rest
