"""DataLoaderConfiguration with 2 real processes: split_batches, even_batches=False with
gather_for_metrics, the seedable sampler, and load_state + skip_first_batches (see the script)."""

from __future__ import annotations

import pytest
import torch
from dataloader_config_script import loader
from launching import Launched, launch


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Launched:
    result = launch("dataloader_config_script.py", str(tmp_path_factory.mktemp("dataloader_config")))
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def _plain(size: int, batch_size: int, epochs: int) -> list[list[list[int]]]:
    plain = loader(size, batch_size)
    return [[batch.tolist() for batch in plain] for _ in range(epochs)]


def test_split_batches_gives_each_process_half_of_every_batch_the_loader_yields(run: Launched) -> None:
    first, second = run.of("split")
    for epoch, batches in enumerate(_plain(13, 4, 2)):
        assert len(first[epoch]) == len(second[epoch]) == len(batches) == 4
        for step, batch in enumerate(batches):
            assert (first[epoch][step] + second[epoch][step])[: len(batch)] == batch
            assert len(first[epoch][step]) == len(second[epoch][step])
    message = run.of("split_error")[0]
    assert "batch_size=3 cannot be split over num_processes=2" in message and "multiple of 2" in message


def test_even_batches_false_pads_nothing_and_gather_for_metrics_sees_each_sample_once(run: Launched) -> None:
    assert run.of("uneven") == [
        {"len": 2, "batches": [[0, 1, 2, 3], [8, 9]]},
        {"len": 1, "batches": [[4, 5, 6, 7]]},
    ]
    expected = [batch for batch in _plain(10, 6, 1)[0]]  # one process of batch 2 x 3, same generator
    for even in (False, True):
        first, second = run.of(f"gathered_{even}")
        assert first == second == expected


def test_the_seedable_sampler_orders_epoch_e_by_data_seed_plus_e_on_every_process(run: Launched) -> None:
    first, second = run.of("seeded")
    for epoch in range(2):
        together = [i for a, b in zip(first[epoch], second[epoch]) for i in a + b]
        assert together == torch.randperm(12, generator=torch.Generator().manual_seed(7 + epoch)).tolist()


def test_load_state_then_skip_first_batches_sees_each_batch_once(run: Launched) -> None:
    """With use_stateful_dataloader=True."""
    straight, resumed = run.of("straight"), run.of("resumed")
    assert resumed == straight
    assert all(len(batches) == 1 + 4 for batches in straight)  # 1 left of epoch 1 (4 per process), epoch 2 whole
    assert straight[0] != straight[1]


def test_by_default_load_state_leaves_each_processs_loader_as_prepared(run: Launched) -> None:
    """As under Accelerate: the resumed pass is a fresh loader's first epoch, less the script's skip."""
    fresh, resumed = run.of("fresh"), run.of("resumed_default")
    assert resumed == [epochs[0][3:] + epochs[1] for epochs in fresh]
    assert resumed != run.of("straight")
