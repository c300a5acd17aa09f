"""IterableDataset DataLoaders prepared on 2 real processes (iterable_script.py): the union of the
processes' batches at each step is the batch one process with batch 2 x B sees, in order; set_epoch
reaches the dataset; a dataset's own generator is taken from process 0. (Batch for batch equality
with Accelerate, padding and drop_last included: test_accelerate_parity.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from iterable_script import SizedStream, Stream
from launching import Launched, launch
from torch.utils.data import DataLoader


@pytest.fixture(scope="module")
def run() -> Launched:
    result = launch("iterable_script.py", timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def _one_process(dataset: Any, batch_size: int, epochs: int = 2) -> list[list[list[int]]]:
    """What one process with the whole batch sees (torch alone), epoch by epoch."""
    seen = []
    for epoch in range(epochs):
        if hasattr(dataset, "set_epoch"):
            dataset.set_epoch(epoch)
        seen.append([batch.tolist() for batch in DataLoader(dataset, batch_size=batch_size)])
    return seen


@pytest.mark.parametrize("name, dataset", [("sized", SizedStream(23)), ("unsized", Stream(23))])
def test_the_processes_together_see_one_process_with_twice_the_batch(run: Launched, name: str, dataset: Any) -> None:
    first, second = run.of(name)
    for epoch, reference in enumerate(_one_process(dataset, 6)):
        steps = list(zip(first[epoch]["batches"], second[epoch]["batches"]))
        assert len(steps) == len(reference) == 4
        for (a, b), whole in zip(steps, reference):
            assert len(a) == len(b) == 3  # the last global batch is padded: same number of full batches
            assert (a + b)[: len(whole)] == whole
        assert steps[-1][1][-1] == reference[0][0]  # padded from the start of that epoch's stream
        for process in (first, second):
            assert process[epoch]["gathered"] == reference  # each sample once, in order
            assert process[epoch]["last"] == {"end": True, "remainder": 5, "active": True}
    assert run.of(f"{name}_set_epoch") == [[0, 1], [0, 1]]


def test_len_counts_this_processs_batches_and_raises_without_a_dataset_len(run: Launched) -> None:
    assert run.of("sized_len") == [4, 4]
    assert all("has no len()" in message for message in run.of("unsized_len"))


def test_set_epoch_numbers_the_next_epoch_and_reaches_the_dataset(run: Launched) -> None:
    first, second = run.of("explicit_epoch")
    assert first["set_epoch"] == [5, 5, 6] and first["iteration"] == 7
    for epoch, shift in enumerate((5, 6)):
        together = [i for a, b in zip(first["epochs"][epoch], second["epochs"][epoch]) for i in a + b]
        assert together == [(i + shift) % 8 for i in range(8)]


def test_a_dataset_generator_is_taken_from_process_0_each_epoch(run: Launched) -> None:
    first, second = run.of("shuffled")
    for epoch in range(2):
        assert first[epoch]["gathered"] == second[epoch]["gathered"]
        assert sorted(i for batch in first[epoch]["gathered"] for i in batch) == list(range(12))
    assert first[0]["gathered"] != first[1]["gathered"]
