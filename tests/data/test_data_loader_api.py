"""A prepared dataloader as scripts written for Accelerate use it (one process): it is a torch
DataLoader, pickles, has set_epoch / remainder / total_batch_size, and accel.data_loader has
Accelerate's names. Two processes: tests/distributed/two_processes/test_iterable_sharding.py."""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from accel import Accelerator
from accel.data.loader import PreparedDataLoader
from accel.training.gradient_state import GradientState
from accel.utils import DataLoaderConfiguration

CPU = torch.device("cpu")


class EpochRecorder(TensorDataset):
    """A map-style dataset that records the epochs set on it."""

    def __init__(self, size: int) -> None:
        super().__init__(torch.arange(size))
        self.epochs: list[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)


def _ids(loader: Any) -> list[list[int]]:
    return [batch[0].tolist() for batch in loader]


def test_a_prepared_loader_is_a_torch_dataloader_with_the_scripts_attributes() -> None:
    dataset = TensorDataset(torch.arange(10))
    original = DataLoader(dataset, batch_size=3, drop_last=False, shuffle=True)
    prepared = Accelerator(cpu=True).prepare(original)
    assert isinstance(prepared, DataLoader) and isinstance(prepared, PreparedDataLoader)
    assert (prepared.dataset, prepared.batch_size, prepared.num_workers, prepared.drop_last) == (dataset, 3, 0, False)
    assert prepared.collate_fn is original.collate_fn and prepared.sampler is original.sampler
    assert len(prepared) == 4 and prepared._is_accelerate_prepared
    assert sorted(i for batch in _ids(prepared) for i in batch) == list(range(10))


def test_preparing_a_prepared_loader_gives_it_back() -> None:
    accelerator = Accelerator(cpu=True)
    prepared = accelerator.prepare(DataLoader(list(range(4)), batch_size=2))
    assert PreparedDataLoader(prepared, CPU, GradientState(1), False) is prepared
    assert accelerator.prepare(prepared) is prepared


def test_a_prepared_loader_and_its_accelerator_pickle() -> None:
    accelerator = Accelerator(cpu=True)
    prepared = accelerator.prepare(DataLoader(TensorDataset(torch.arange(10)), batch_size=4))
    loaded = pickle.loads(pickle.dumps(prepared))
    assert isinstance(loaded, PreparedDataLoader) and len(loaded) == 3
    assert _ids(loaded) == _ids(prepared) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    restored = pickle.loads(pickle.dumps(accelerator))
    assert _ids(restored._dataloaders[0]) == _ids(prepared)


def test_set_epoch_chooses_the_seedable_samplers_order_and_reaches_the_dataset() -> None:
    dataset = EpochRecorder(12)
    config = DataLoaderConfiguration(use_seedable_sampler=True, data_seed=3)
    prepared = Accelerator(cpu=True, dataloader_config=config).prepare(DataLoader(dataset, batch_size=4, shuffle=True))
    first = [_ids(prepared) for _ in range(3)]
    prepared.set_epoch(1)
    assert prepared.iteration == 1
    assert [_ids(prepared) for _ in range(2)] == first[1:]
    assert dataset.epochs == [0, 1, 2, 1, 1, 2]  # each start, and the explicit call at once
    with pytest.raises(ValueError, match=r"set_epoch\(epoch=-1\)"):
        prepared.set_epoch(-1)


def test_set_epoch_after_load_state_keeps_the_position_of_the_same_epoch_only() -> None:
    def prepared() -> PreparedDataLoader:
        loader = DataLoader(TensorDataset(torch.arange(9)), batch_size=3, shuffle=True,
                            generator=torch.Generator().manual_seed(1))
        return PreparedDataLoader(loader, CPU, GradientState(1), False)

    running = prepared()
    _ids(running)
    batches = iter(running)
    next(batches)
    state, rest = running.state_dict(), [b[0].tolist() for b in batches]
    same = prepared()
    same.load_state_dict(state)
    same.set_epoch(1)
    assert _ids(same) == rest
    other = prepared()
    other.load_state_dict(state)
    with pytest.warns(UserWarning, match="batch 1 of epoch 1; epoch 0 will start from its beginning"):
        other.set_epoch(0)
    assert len(_ids(other)) == 3


def test_remainder_and_end_of_dataloader_follow_accelerate() -> None:
    accelerator = Accelerator(cpu=True)
    state = accelerator.gradient_state
    prepared = accelerator.prepare(DataLoader(list(range(10)), batch_size=4))
    assert prepared.total_batch_size == 4 and prepared.total_dataset_length == 10
    seen = [(state.end_of_dataloader, state.remainder, prepared.end_of_dataloader) for _ in prepared]
    assert seen == [(False, 2, False), (False, 2, False), (True, 2, True)]
    assert (state.remainder, state.in_dataloader) == (-1, False)
    dropping = accelerator.prepare(DataLoader(list(range(10)), batch_size=4, drop_last=True))
    assert [state.remainder for _ in dropping] == [-1, -1]


class Stream(IterableDataset):  # type: ignore[type-arg]
    def __iter__(self) -> Iterator[int]:
        yield from range(7)


def test_an_iterable_dataset_in_one_process_is_unchanged() -> None:
    prepared = Accelerator(cpu=True).prepare(DataLoader(Stream(), batch_size=3))
    assert [batch.tolist() for batch in prepared] == [[0, 1, 2], [3, 4, 5], [6]]


def test_accel_data_loader_has_accelerates_names() -> None:
    from accel import data_loader

    assert data_loader.DataLoaderShard is PreparedDataLoader
    shard = data_loader.IterableDatasetShard(Stream(), batch_size=2, num_processes=2, process_index=1)
    assert list(shard) == [2, 3, 6, 0]  # padded from the stream's start; no tags outside a prepared loader
    split = data_loader.IterableDatasetShard(Stream(), batch_size=2, num_processes=2, process_index=0, split_batches=True)
    assert list(split) == [0, 2, 4, 6]
    with pytest.raises(ValueError, match="batch_size=3 cannot be split over num_processes=2"):
        data_loader.IterableDatasetShard(Stream(), batch_size=3, num_processes=2, split_batches=True)
    loader = DataLoader(list(range(6)), batch_size=2)
    assert [b.tolist() for b in data_loader.skip_first_batches(loader, 1)] == [[2, 3], [4, 5]]
    assert issubclass(data_loader.SeedableRandomSampler, torch.utils.data.RandomSampler)


def test_prepare_data_loader_without_an_accelerator() -> None:
    from accel.data_loader import prepare_data_loader

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        accelerator = Accelerator(cpu=True)
    prepared = prepare_data_loader(DataLoader(list(range(8)), batch_size=4), num_processes=1, process_index=0)
    assert isinstance(prepared, PreparedDataLoader) and [b.tolist() for b in prepared] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    ends = [accelerator.gradient_state.end_of_dataloader for _ in prepared]  # joined to the running Accelerator's
    assert ends == [False, True]
    second = prepare_data_loader(DataLoader(list(range(8)), batch_size=2), num_processes=2, process_index=1)
    assert [b.tolist() for b in second] == [[2, 3], [6, 7]]  # process 1's part, computed here (as Accelerate)
    with pytest.raises(ValueError, match=r"num_processes=2, process_index=2\).*0 <= process_index < num_processes"):
        prepare_data_loader(DataLoader(list(range(8))), num_processes=2, process_index=2)
    with pytest.raises(ValueError, match="dispatch_batches=True"):
        prepare_data_loader(DataLoader(list(range(8))), dispatch_batches=True)
    with pytest.raises(ValueError, match="rng_types"):
        prepare_data_loader(DataLoader(list(range(8))), rng_types=["torch"])


def test_a_scripts_own_seedable_sampler_takes_accelerates_arguments_and_is_kept() -> None:
    from accel.data_loader import SeedableRandomSampler

    data = list(range(8))
    sampler = SeedableRandomSampler(data_source=data, generator=torch.Generator(), data_seed=4)
    baseline = [list(sampler) for _ in range(2)]  # a pass run to its end moves to the next epoch
    assert baseline == [torch.randperm(8, generator=torch.Generator().manual_seed(4 + e)).tolist() for e in range(2)]
    config = DataLoaderConfiguration(use_seedable_sampler=True)
    prepared = Accelerator(cpu=True, dataloader_config=config).prepare(
        DataLoader(data, batch_size=8, sampler=SeedableRandomSampler(data, data_seed=4)))
    assert prepared.sampler.initial_seed == 4
    assert [b.tolist() for _ in range(2) for b in prepared] == baseline
