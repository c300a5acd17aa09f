"""DataLoaderConfiguration in prepared dataloaders: what is refused at construction, and how
split_batches, even_batches, the seedable sampler and non_blocking change the batches.

Several processes are simulated here one after another (each with its own ProcessState, the
broadcasts of process 0's choices being the identity); distributed/test_dataloader_config.py
runs the same options in two real processes.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    SequentialSampler,
    WeightedRandomSampler,
)
from torch.utils.data.distributed import DistributedSampler

from accel.data import sharding
from accel.data.configuration import DataLoaderConfiguration
from accel.data.loader import PreparedDataLoader
from accel.data.loader_options import check_dataloader_config
from accel.distributed.process_state import ProcessState
from accel.training.gradient_state import GradientState

CPU = torch.device("cpu")


@pytest.fixture
def simulated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every simulated process draws alike, so process 0's broadcasts change nothing."""
    sent: list[Any] = []

    def broadcast_object(obj: Any, state: ProcessState, from_process: int = 0) -> Any:
        if state.process_index == from_process:  # the simulated process 0 runs its epoch first
            sent[:] = [obj]
        return sent[0]

    monkeypatch.setattr(sharding.operations, "broadcast", lambda data, state, from_process=0, check_shapes=True: data)
    monkeypatch.setattr(sharding.operations, "broadcast_object", broadcast_object)


def _prepared(loader: DataLoader[Any], processes: int = 1, rank: int = 0, **config: Any) -> PreparedDataLoader:
    state = ProcessState(CPU, rank, rank, processes, processes)
    return PreparedDataLoader(loader, CPU, GradientState(1), False, state, config=DataLoaderConfiguration(**config))


def _epoch(loader: Any) -> list[list[int]]:
    return [batch.tolist() for batch in loader]


# ----------------------------------------------------------------- refused at construction
@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"data_seed": 7}, r"data_seed=7\) has no effect with use_seedable_sampler=False.*use_seedable_sampler=True"),
    ],
)
def test_options_accel_cannot_honour_raise_naming_option_value_and_remedy(config: dict[str, Any], expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        check_dataloader_config(DataLoaderConfiguration(**config))
    with pytest.raises(ValueError, match=expected):  # also when a loader is prepared with it directly
        _prepared(DataLoader(list(range(4)), batch_size=2), **config)


def test_every_honoured_value_passes_the_check() -> None:
    for config in [
        DataLoaderConfiguration(),
        DataLoaderConfiguration(dispatch_batches=False),
        DataLoaderConfiguration(split_batches=True, even_batches=False, non_blocking=True),
        DataLoaderConfiguration(use_stateful_dataloader=True),  # load_state restores positions (no torchdata)
        DataLoaderConfiguration(use_seedable_sampler=True, data_seed=3),
    ]:
        check_dataloader_config(config)
    with pytest.raises(TypeError, match=r"dataloader_config=\{'split_batches': True\} is not accepted"):
        check_dataloader_config({"split_batches": True})  # type: ignore[arg-type]


# ----------------------------------------------------------------- split_batches
def test_split_batches_needs_a_batch_size_that_divides_among_the_processes() -> None:
    with pytest.raises(ValueError, match=r"batch_size=5 cannot be split over num_processes=2.*multiple of 2"):
        _prepared(DataLoader(list(range(10)), batch_size=5), 2, split_batches=True)
    sampler = BatchSampler(SequentialSampler(range(10)), 4, False)
    custom = type("Buckets", (), {"__iter__": lambda self: iter(sampler), "__len__": lambda self: len(sampler)})()
    with pytest.raises(ValueError, match=r"batch sampler Buckets has no int batch_size"):
        _prepared(DataLoader(list(range(10)), batch_sampler=custom), 2, split_batches=True)
    assert len(_prepared(DataLoader(list(range(10)), batch_size=5), split_batches=True)) == 2  # 1 process: no split


@pytest.mark.usefixtures("simulated")
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("size", [12, 13, 9])
def test_split_batches_each_process_takes_its_share_of_every_batch_the_loader_yields(shuffle: bool, size: int) -> None:
    def loader() -> DataLoader[Any]:
        return DataLoader(list(range(size)), batch_size=4, shuffle=shuffle, generator=torch.Generator().manual_seed(1))

    whole = _epoch(loader())
    parts = [_epoch(_prepared(loader(), 2, rank, split_batches=True)) for rank in range(2)]
    assert [len(part) for part in parts] == [len(whole)] * 2
    for step, batch in enumerate(whole):
        together = parts[0][step] + parts[1][step]
        assert together[: len(batch)] == batch
        assert len(parts[0][step]) == len(parts[1][step])  # even_batches: a short batch is split evenly, padded
    assert all(len(b) == 2 for part in parts for b in part[: size // 4])


# ----------------------------------------------------------------- even_batches=False
@pytest.mark.usefixtures("simulated")
@pytest.mark.parametrize(
    ("size", "batch", "split", "lengths", "last_sizes"),
    [
        (10, 3, False, [2, 2], [3, 1]),  # last global step: 4 samples, 3 + 1
        (10, 4, False, [2, 1], [2, 4]),  # last global step: 2 samples, all to process 0
        (12, 3, False, [2, 2], [3, 3]),
        (10, 4, True, [3, 2], [2, 2]),  # split: the last batch of 2 goes to process 0
        (11, 4, True, [3, 3], [2, 1]),
    ],
)
def test_even_batches_false_pads_nothing_and_lets_processes_differ(
    size: int, batch: int, split: bool, lengths: list[int], last_sizes: list[int]
) -> None:
    def loader() -> DataLoader[Any]:
        return DataLoader(list(range(size)), batch_size=batch)

    prepared = [_prepared(loader(), 2, rank, even_batches=False, split_batches=split) for rank in range(2)]
    parts = [_epoch(p) for p in prepared]
    assert [len(part) for part in parts] == lengths  # (len() is Accelerate's: with split_batches, the loader's own)
    assert [len(part[-1]) for part in parts] == last_sizes
    seen = sorted(i for part in parts for b in part for i in b)
    assert seen == list(range(size))  # every sample once: no padding
    keeps = [[p.gathered_rows_to_keep() for _ in p] for p in prepared]
    remainder = size % (batch if split else 2 * batch) or None  # Accelerate's rule, even without padding
    assert keeps == [[None] * (length - 1) + [remainder] for length in lengths]


@pytest.mark.usefixtures("simulated")
def test_even_batches_false_with_a_custom_batch_sampler_deals_whole_batches_without_padding() -> None:
    batches = [[0, 1, 2], [3, 4], [5, 6, 7], [8], [9]]
    custom = type("Given", (), {"__iter__": lambda self: iter(batches), "__len__": lambda self: len(batches)})()
    parts = [_epoch(_prepared(DataLoader(list(range(10)), batch_sampler=custom), 2, rank, even_batches=False))
             for rank in range(2)]
    assert parts == [[[0, 1, 2], [5, 6, 7], [9]], [[3, 4], [8]]]
    even = [_epoch(_prepared(DataLoader(list(range(10)), batch_sampler=custom), 2, rank)) for rank in range(2)]
    assert even == [[[0, 1, 2], [5, 6, 7], [9]], [[3, 4], [8], [0, 1, 2]]]  # the default pads from the start


def test_options_a_scripts_own_distributed_sampler_cannot_follow_are_refused() -> None:
    data = list(range(8))
    sampler = DistributedSampler(data, num_replicas=2, rank=0, shuffle=False)
    with pytest.raises(ValueError, match=r"split_batches=True, even_batches=False\) cannot apply.*DistributedSampler"):
        _prepared(DataLoader(data, batch_size=2, sampler=sampler), 2, split_batches=True, even_batches=False)


# ----------------------------------------------------------------- the seedable sampler
def _accelerates_order(size: int, seed: int, epoch: int) -> list[int]:
    """Accelerate's SeedableRandomSampler: the generator is seeded with seed + epoch, then RandomSampler draws."""
    return torch.randperm(size, generator=torch.Generator().manual_seed(seed + epoch)).tolist()


@pytest.mark.parametrize("generator", [False, True])
def test_the_seedable_sampler_draws_epoch_e_from_data_seed_plus_e_whatever_the_global_rng(generator: bool) -> None:
    options: dict[str, Any] = {"generator": torch.Generator().manual_seed(99)} if generator else {}
    orders = []
    for global_seed in (0, 1):
        torch.manual_seed(global_seed)
        prepared = _prepared(DataLoader(list(range(10)), batch_size=10, shuffle=True, **options),
                             use_seedable_sampler=True, data_seed=42)
        orders.append([_epoch(prepared)[0] for _ in range(3)])
    assert orders[0] == orders[1] == [_accelerates_order(10, 42, epoch) for epoch in range(3)]


def test_without_data_seed_the_seedable_sampler_uses_torchs_initial_seed() -> None:
    torch.manual_seed(5)
    prepared = _prepared(DataLoader(list(range(10)), batch_size=10, shuffle=True), use_seedable_sampler=True)
    torch.rand(3)  # later draws from the global RNG change nothing
    assert [_epoch(prepared)[0] for _ in range(2)] == [_accelerates_order(10, 5, e) for e in range(2)]


@pytest.mark.usefixtures("simulated")
def test_the_seedable_sampler_is_shared_by_the_processes_and_resumes_mid_epoch() -> None:
    def loader() -> DataLoader[Any]:
        return DataLoader(list(range(12)), batch_size=3, shuffle=True)

    views = [_prepared(loader(), 2, rank, use_seedable_sampler=True, data_seed=8) for rank in range(2)]
    for epoch in range(2):
        parts = [_epoch(view) for view in views]
        together = [i for step in zip(*parts) for part in step for i in part]
        assert together == _accelerates_order(12, 8, epoch)
    one = _prepared(loader(), use_seedable_sampler=True, data_seed=8)
    batches = iter(one)
    next(batches)
    state = one.state_dict()
    rest = [b.tolist() for b in batches]
    torch.manual_seed(1234)  # another run
    resumed = _prepared(loader(), use_seedable_sampler=True, data_seed=8)
    resumed.load_state_dict(state)
    assert _epoch(resumed) == rest
    assert [i for b in _epoch(resumed) for i in b] == _accelerates_order(12, 8, 1)


def test_the_seedable_sampler_refuses_a_sampler_it_cannot_reseed_and_leaves_an_unshuffled_one() -> None:
    weighted = WeightedRandomSampler([1.0] * 6, 6)
    with pytest.raises(ValueError, match=r"use_seedable_sampler=True\): .*WeightedRandomSampler.*use_seedable_sampler=False"):
        _prepared(DataLoader(list(range(6)), batch_size=2, sampler=weighted), use_seedable_sampler=True)
    ordered = DataLoader(list(range(6)), batch_size=2)
    assert _prepared(ordered, use_seedable_sampler=True).loader is ordered


# ----------------------------------------------------------------- non_blocking
@pytest.mark.parametrize("non_blocking", [False, True])
def test_non_blocking_is_passed_to_tensor_to(monkeypatch: pytest.MonkeyPatch, non_blocking: bool) -> None:
    calls: list[Any] = []
    original = torch.Tensor.to

    def spy(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(kwargs.get("non_blocking"))
        return original(self, *args, **kwargs)

    meta = torch.device("meta")  # any device other than the CPU makes the loader move batches
    config = DataLoaderConfiguration(non_blocking=non_blocking)
    prepared = PreparedDataLoader(DataLoader(list(range(4)), batch_size=2), meta, GradientState(1), True, config=config)
    monkeypatch.setattr(torch.Tensor, "to", spy)
    batches = list(prepared)
    assert [b.device.type for b in batches] == ["meta", "meta"]
    assert calls == [non_blocking, non_blocking]


@pytest.mark.usefixtures("simulated")
def test_even_batches_can_be_overridden_inside_a_block_as_join_uneven_inputs_does() -> None:
    prepared = [_prepared(DataLoader(list(range(10)), batch_size=4), 2, rank) for rank in range(2)]
    with prepared[0].override_even_batches(False), prepared[1].override_even_batches(False):
        assert [_epoch(p) for p in prepared] == [[[0, 1, 2, 3], [8, 9]], [[4, 5, 6, 7]]]
    assert [_epoch(p) for p in prepared] == [[[0, 1, 2, 3], [8, 9, 0, 1]], [[4, 5, 6, 7], [2, 3, 4, 5]]]
    with _prepared(DataLoader(list(range(10)), batch_size=4)).override_even_batches(False):
        pass  # one process: nothing to even out
    sampler = DistributedSampler(list(range(8)), num_replicas=2, rank=0)
    own = _prepared(DataLoader(list(range(8)), batch_size=2, sampler=sampler), 2)
    with pytest.raises(ValueError, match=r"even_batches=False\) cannot apply.*DistributedSampler"), \
            own.override_even_batches(False):
        pass


def test_even_batches_false_on_an_iterable_dataset_warns_that_it_does_not_apply() -> None:
    """As under Accelerate the last global batch of an IterableDataset is completed anyway; accel says so
    instead of ignoring the option silently."""

    class Stream(torch.utils.data.IterableDataset[torch.Tensor]):
        def __iter__(self) -> Any:
            return iter(torch.arange(10.0))

    from accel._warnings import _given

    _given.clear()
    config = DataLoaderConfiguration(even_batches=False)
    with pytest.warns(UserWarning, match="even_batches=False does not apply to an IterableDataset"):
        PreparedDataLoader(torch.utils.data.DataLoader(Stream(), batch_size=4), torch.device("cpu"), GradientState(),
                           place=False, config=config, layout=(2, 0))
