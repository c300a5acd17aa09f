"""skip_first_batches leaves out the first batches of every pass, for each kind of dataloader; on
accel's prepared dataloader, of its next epoch only, counted from the epoch's start. A resumed
Accelerate script gets Accelerate's batches by default (load_state leaves the loader as prepared);
with use_stateful_dataloader=True load_state positions the loader, and the skip still counts from
the epoch's start, so a script that does both sees every batch once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from accel import Accelerator, DataLoaderConfiguration
from accel.data.loader import PreparedDataLoader
from accel.data.skipping import SkippedEpochStart, skip_first_batches
from accel.training.gradient_state import GradientState

CPU = torch.device("cpu")


def _values(loader: Any) -> list[list[int]]:
    return [batch[0].tolist() if isinstance(batch, list) else batch.tolist() for batch in loader]


def test_a_map_style_loader_keeps_its_order_and_settings_and_skips_each_pass() -> None:
    dataset = TensorDataset(torch.arange(10))
    original = DataLoader(dataset, batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(0))
    expected = _values(DataLoader(dataset, batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(0)))
    skipped = skip_first_batches(original, 2)
    assert isinstance(skipped, DataLoader) and len(skipped) == 2
    assert _values(skipped) == expected[2:]
    assert len(_values(skipped)) == 2  # the next pass skips again
    assert _values(skip_first_batches(DataLoader(dataset, batch_size=None), 8)) == [8, 9]


def test_an_iterable_dataset_loader_and_any_iterable() -> None:
    class Numbers(IterableDataset):
        def __iter__(self):
            return iter(range(7))

    assert _values(skip_first_batches(DataLoader(Numbers(), batch_size=2), 2)) == [[4, 5], [6]]
    batches = skip_first_batches([[1], [2], [3]], 1)
    assert list(batches) == [[2], [3]] and list(batches) == [[2], [3]] and len(batches) == 2


def test_a_loader_with_its_own_skip_first_batches_decides_itself() -> None:
    class Own:
        def skip_first_batches(self, num_batches: int) -> str:
            return f"own {num_batches}"

    assert skip_first_batches(Own(), 3) == "own 3"


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match=r"num_batches=-1\) is not accepted: give an int >= 0"):
        skip_first_batches([], -1)
    with pytest.raises(TypeError, match="takes a dataloader"):
        skip_first_batches(5, 1)


# ----------------------------------------------------------------- accel's prepared dataloader
def _shuffled(prepared: bool = True, generator: bool = True) -> Any:
    options = {"generator": torch.Generator().manual_seed(4)} if generator else {}
    loader = DataLoader(list(range(10)), batch_size=2, shuffle=True, **options)
    return PreparedDataLoader(loader, CPU, GradientState(1), place=False) if prepared else loader


def _epochs(count: int) -> list[list[list[int]]]:
    """What torch's own DataLoader yields in `count` epochs."""
    loader = _shuffled(prepared=False)
    return [_values(loader) for _ in range(count)]


def test_a_prepared_loader_skips_the_start_of_its_next_epoch_only() -> None:
    expected = _epochs(3)
    prepared = _shuffled()
    skipped = skip_first_batches(prepared, 2)
    assert isinstance(skipped, SkippedEpochStart) and len(skipped) == 3 and len(prepared) == 5
    assert _values(skipped) == expected[0][2:]
    assert _values(skipped) == expected[1] and len(skipped) == 5  # later passes are whole epochs
    assert _values(prepared) == expected[2]  # and the order goes on as torch's would
    assert skipped.batch_size == 2  # everything else is the prepared loader's


def test_a_position_taken_in_a_skipped_epoch_counts_from_the_epochs_start() -> None:
    prepared = _shuffled()
    batches = iter(skip_first_batches(prepared, 3))
    next(batches)
    assert (prepared.state_dict()["epoch"], prepared.state_dict()["batch"]) == (0, 4)
    state = prepared.state_dict()
    rest = _values(batches)
    resumed = _shuffled()
    resumed.load_state_dict(state)
    assert _values(resumed) == rest


def _loaded_at(batches: int) -> tuple[PreparedDataLoader, torch.Tensor]:
    """A new prepared loader positioned, as by load_state, after `batches` batches of epoch 0."""
    prepared = _shuffled()
    running = iter(prepared)
    for _ in range(batches):
        next(running)
    state, rng = prepared.state_dict(), torch.get_rng_state()
    resumed = _shuffled()
    resumed.load_state_dict(state)
    torch.set_rng_state(rng)
    return resumed, rng


@pytest.mark.parametrize(("saved", "skip", "first_epoch"), [(3, 3, 3), (3, 1, 1), (3, 4, 4), (2, 9, 5), (3, 0, 0)])
def test_after_a_resume_skipping_counts_from_the_start_of_the_loaded_epoch(saved: int, skip: int, first_epoch: int) -> None:
    """k equal to the loaded position changes nothing; fewer goes back to batch k, more skips further."""
    expected = _epochs(2)
    resumed, _ = _loaded_at(saved)
    assert _values(skip_first_batches(resumed, skip)) == expected[0][first_epoch:]
    assert _values(resumed) == expected[1]


@pytest.mark.parametrize("skip", [0, 2])
def test_after_a_position_at_the_end_of_an_epoch_the_skip_is_for_the_next_epoch(skip: int) -> None:
    """Saved after the epoch's last batch, inside the loop: an Accelerate script computes the next epoch
    and resume_step 0 (or more); the loaded epoch, which has nothing left, is not replayed (nor yielded
    as an empty pass: the batch after the last one yielded is the next epoch's first)."""
    expected = _epochs(3)
    resumed, _ = _loaded_at(5)
    assert _values(skip_first_batches(resumed, skip)) == expected[1][skip:]
    assert _values(resumed) == expected[2]
    fresh, _ = _loaded_at(5)
    assert _values(fresh) == expected[1] and _values(fresh) == expected[2]  # without a skip: the next epoch, whole


def test_skipping_a_skipped_view_adds_up() -> None:
    expected = _epochs(1)
    assert _values(skip_first_batches(skip_first_batches(_shuffled(), 1), 2)) == expected[0][3:]


def _accelerate_script(folder: Path, generator: bool, resume: str | None = None, stop_at: int | None = None,
                       library: str = "accel", stateful: bool = False, skips: bool = True) -> list[list[int]]:
    """The loop of Accelerate's examples/by_feature/checkpointing.py, under `library` (accel or
    accelerate): load_state, then skip_first_batches of the steps done in the resumed epoch (computed
    from the checkpoint's name) for the first epoch (not when `skips` is False: a stateful loader's
    script, as that example's --use_stateful_dataloader)."""
    if library == "accelerate":
        import accelerate
        from accelerate.state import AcceleratorState

        AcceleratorState._reset_state(True)
        accelerator: Any = accelerate.Accelerator(cpu=True)
    else:
        config = DataLoaderConfiguration(use_stateful_dataloader=stateful)
        accelerator = Accelerator(cpu=True, dataloader_config=config)
    torch.manual_seed(0)  # set_seed(0)
    loader = accelerator.prepare(_shuffled(prepared=False, generator=generator))
    starting_epoch, resume_step, overall_step = 0, None, 0
    if resume is not None:
        accelerator.load_state(folder / resume)
        overall_step = int(resume.removeprefix("step_"))
        starting_epoch = overall_step // len(loader)
        resume_step = overall_step - starting_epoch * len(loader)
    seen = []
    for epoch in range(starting_epoch, 3):
        if resume is not None and epoch == starting_epoch and resume_step is not None and skips:
            active = accelerator.skip_first_batches(loader, resume_step)
        else:
            active = loader
        for batch in active:
            seen.append(batch.tolist())
            overall_step += 1
            if overall_step == stop_at:
                accelerator.save_state(folder / f"step_{overall_step}")
                return seen
    return seen


def _resumed_run(folder: Path, stops: tuple[int, ...], generator: bool, **options: Any) -> list[list[int]]:
    """The batches of a run stopped (after a save_state) at each of `stops` and resumed from there."""
    seen = _accelerate_script(folder, generator, stop_at=stops[0], **options)
    for previous, stop in zip(stops, [*stops[1:], None]):
        seen += _accelerate_script(folder, generator, resume=f"step_{previous}", stop_at=stop, **options)
    return seen


STOPS = pytest.mark.parametrize("stops", [(3,), (5,), (7, 8), (5, 10)], ids=["mid-epoch", "epoch-end", "twice", "ends"])
GENERATOR = pytest.mark.parametrize("generator", [True, False], ids=["own-generator", "global-rng"])


@GENERATOR
@STOPS
def test_by_default_a_resumed_accelerate_script_gets_accelerates_batches(
    tmp_path: Path, stops: tuple[int, ...], generator: bool
) -> None:
    """load_state leaves the loader as prepared (a fresh epoch, as under Accelerate, run here for real):
    the script's own skip_first_batches decides, and every resumed batch is Accelerate's."""
    ours = _resumed_run(tmp_path / "accel", stops, generator)
    theirs = _resumed_run(tmp_path / "accelerate", stops, generator, library="accelerate")
    assert len(ours) == 15 and ours == theirs


@GENERATOR
@STOPS
@pytest.mark.parametrize("skips", [True, False], ids=["script-skips", "script-does-not-skip"])
def test_with_use_stateful_dataloader_a_resumed_script_sees_every_batch_once(
    tmp_path: Path, stops: tuple[int, ...], generator: bool, skips: bool
) -> None:
    """The opt-in: load_state puts the loader back after its last batch; a script that also skips
    (counted from the epoch's start) and one that does not both see the uninterrupted run's batches."""
    straight = _accelerate_script(tmp_path, generator, stateful=True)
    assert len(straight) == 15
    assert _resumed_run(tmp_path, stops, generator, stateful=True, skips=skips) == straight


def test_skip_data_loader_is_a_dataloader_without_its_first_batches() -> None:
    from accel.data_loader import SkipDataLoader

    loader = SkipDataLoader(list(range(16)), batch_size=4, skip_batches=2)
    assert isinstance(loader, DataLoader) and len(loader) == 2
    assert [batch.tolist() for batch in loader] == [[8, 9, 10, 11], [12, 13, 14, 15]]
    assert [batch.tolist() for batch in loader] == [[8, 9, 10, 11], [12, 13, 14, 15]]  # on every pass
    with pytest.raises(ValueError, match=r"use_stateful_dataloader=True\) is not supported: a SkipDataLoader"):
        SkipDataLoader(list(range(4)), skip_batches=1, use_stateful_dataloader=True)
