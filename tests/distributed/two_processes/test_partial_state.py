"""PartialState, AcceleratorState, split_between_processes and accel.utils' collectives with 2 real
processes (one launch)."""

from __future__ import annotations

import pytest
import torch

from launching import Launched, launch


@pytest.fixture(scope="module")
def run() -> Launched:
    result = launch("partial_state_script.py")
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def test_partial_state_and_an_accelerator_share_one_group_and_agree(run: Launched) -> None:
    assert run.of("layout") == [
        [0, 0, 2, True, True, False, "cpu:0", "MULTI_CPU", True, True, True],
        [1, 1, 2, False, False, True, "cpu:0", "MULTI_CPU", True, True, True],
    ]
    assert run.of("accelerator_state") == [["no", "bf16", 2]] * 2


def test_split_between_processes_gives_contiguous_shares_padded_with_the_last_item(run: Launched) -> None:
    first, second = run.of("split")
    assert (first["list"], second["list"]) == ([0, 1, 2], [3, 4])
    assert (first["list_padded"], second["list_padded"]) == ([0, 1, 2], [3, 4, 4])
    assert (first["one_item_padded"], second["one_item_padded"]) == (["only"], ["only"])
    assert (first["tuple_padded"], second["tuple_padded"]) == (["tuple", "a", "b"], ["tuple", "c", "c"])
    assert first["tensor_padded"] == [[0, 1], [2, 3], [4, 5]]
    assert second["tensor_padded"] == [[6, 7], [8, 9], [8, 9]]
    assert first["dict"] == {"ids": [0, 1], "x": [0.0, 1.0]}
    assert second["dict"] == {"ids": [2, 2], "x": [2.0, 2.0]}


def test_pad_across_processes_pads_every_tensor_to_the_longest(run: Launched) -> None:
    first, second = run.of("pad")
    assert first["a"] == [[0.0, 0.0], [-1.0, -1.0]] and second["a"] == [[1.0, 1.0], [1.0, 1.0]]
    assert first["b"] == [[0], [0]] and second["b"] == [[1, 1], [1, 1]]  # dim 0 is already the same size
    assert first["first"] == [0, 1] and second["first"] == [2, 2]
    assert first["dim1"] == [[0, 9], [0, 9]]
    assert first["gathered"] == second["gathered"] == [[0.0, 0.0], [-1.0, -1.0], [1.0, 1.0], [1.0, 1.0]]


def test_gather_object_concatenates_lists_and_collects_other_objects(run: Launched) -> None:
    assert run.of("gather_object") == [[["r0", 0, "r1", 1], [{"rank": 0}, {"rank": 1}]]] * 2


def test_broadcast_writes_the_senders_values_into_nested_tensors_and_lists(run: Launched) -> None:
    assert run.of("broadcast") == [[[1], [10.0], True, [1, "from 1"], True]] * 2


def test_reduce_sum_mean_max_min(run: Launched) -> None:
    expected = {
        "sum": [1.0, -1.0, 6.0],
        "mean": [0.5, -0.5, 3.0],
        "max": [1.0, 0.0, 3.0],
        "min": [0.0, -1.0, 3.0],
        "default": [0.5, -0.5, 3.0],  # accel.utils.reduce defaults to "mean", as Accelerate's function
        "scaled": [0.5, -0.5, 3.0],
    }
    assert run.of("reduce") == [expected] * 2


def test_decorators_run_the_function_only_where_asked(run: Launched) -> None:
    assert run.of("decorators") == [
        {"main": "ran", "last": None, "process_1": None, "local_0": "ran"},
        {"main": None, "last": "ran", "process_1": "ran", "local_0": None},
    ]
    assert run.stdout.count("PARTIAL PRINTED by") == 1 and "PARTIAL PRINTED by 0" in run.stdout


def test_set_seed_device_specific_adds_the_process_index(run: Launched) -> None:
    expected = [torch.Generator().manual_seed(7 + rank) for rank in range(2)]
    assert run.of("seeded") == pytest.approx([torch.rand(1, generator=g).item() for g in expected])
