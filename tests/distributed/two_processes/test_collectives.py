"""Collectives, data shards and the process group's life cycle, with 2 real processes (one launch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from launching import Launched, launch


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Launched:
    order_file = tmp_path_factory.mktemp("collectives") / "order.txt"
    result = launch("collectives_script.py", str(order_file))
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def test_each_process_knows_its_place(run: Launched) -> None:
    # the device as Accelerate names it on every process of a multi-CPU run (test_device_name.py compares)
    assert run.of("layout") == [[0, 0, 2, True, True, "cpu:0"], [1, 1, 2, False, False, "cpu:0"]]


def test_gather_concatenates_nested_tensors_in_rank_order_even_when_lengths_differ(run: Launched) -> None:
    expected = {"a": [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]], "b0": [0, 10], "b1": [0, 7, 1, 7]}
    assert run.of("gather") == [expected, expected]


def test_reduce_sums_and_averages(run: Launched) -> None:
    assert run.of("reduce") == [{"x": [2.0, 1.0], "n": 3, "mean": [3.0]}] * 2


def test_objects_are_gathered_as_one_list(run: Launched) -> None:
    assert run.of("objects") == [["r0", 0, "r1", 1]] * 2


def test_a_shape_mismatch_raises_on_every_process_naming_it(run: Launched) -> None:
    messages = run.of("mismatch")
    assert messages[0] == messages[1]
    assert "shape [2, 4] on process 1 but [2, 3] on process 0" in messages[0]


def test_reduce_and_broadcast_of_different_shapes_raise_on_every_process_instead_of_hanging(run: Launched) -> None:
    reduce_messages, broadcast_messages = run.of("reduce mismatch"), run.of("broadcast mismatch")
    assert reduce_messages[0] == reduce_messages[1] and broadcast_messages[0] == broadcast_messages[1]
    assert reduce_messages[0].startswith("reduce: tensor 0 has shape [2] on process 1 but [3] on process 0; reduce needs")
    assert "gather_for_metrics" in reduce_messages[0]
    assert broadcast_messages[0].startswith("broadcast: tensor 1 has shape [2, 2] on process 1 but [1, 2] on process 0")


def test_pad_across_processes_refuses_different_numbers_of_dimensions_on_every_process(run: Launched) -> None:
    messages = run.of("pad mismatch")
    assert messages[0] == messages[1] == (
        "pad_across_processes: tensor 0 has shape [1, 1, 6] on process 1 but [1, 5] on process 0; padding evens "
        "out sizes, not numbers of dimensions."
    )


def test_print_is_main_process_only(run: Launched) -> None:
    assert run.stdout.count("PRINTED by") == 1 and "PRINTED by 0" in run.stdout


def test_main_process_first_finishes_before_the_others_start(run: Launched) -> None:
    assert run.of("order") == [["0 start", "0 end", "1 start", "1 end"]] * 2
    assert run.of("on_main") == ["ran", None]


@pytest.mark.parametrize("name", ["shuffled", "generator", "weighted", "distributed_sampler"])
def test_shards_are_disjoint_cover_the_data_and_gather_for_metrics_drops_padding(run: Launched, name: str) -> None:
    ranks = run.of(f"shard_{name}")
    # weighted: 9 samples drawn, 5 batches dealt as 3 rounds of 2 (the last padded with a whole first batch);
    # gather_for_metrics keeps len(dataset) % 4 = 3 rows of the last round, as Accelerate: 8 + 3
    size = 11
    assert ranks[0]["len"] == ranks[1]["len"]  # every process takes the same number of steps
    for epoch in range(2):
        first, second = ranks[0]["mine"][epoch], ranks[1]["mine"][epoch]
        assert len(first) == len(second)
        everyone = ranks[0]["everyone"][epoch]
        assert everyone == ranks[1]["everyone"][epoch]
        assert len(everyone) == size  # the padding duplicates are gone (weighted: Accelerate's count, above)
        assert set(first) | set(second) == set(everyone)
        if name != "weighted":  # sampling with replacement may repeat samples by itself
            assert sorted(everyone) == list(range(11))
            assert len(set(first) & set(second)) <= 1  # at most the one padding duplicate
    assert ranks[0]["everyone"][0] != ranks[0]["everyone"][1]  # a new order each epoch


def test_drop_last_drops_the_short_global_batch(run: Launched) -> None:
    ranks = run.of("shard_sequential_drop_last")
    assert ranks[0]["mine"][0] == [0, 1, 4, 5] and ranks[1]["mine"][0] == [2, 3, 6, 7]
    assert ranks[0]["everyone"][0] == list(range(8))


def test_a_second_accelerator_reuses_the_group_and_end_training_lets_a_new_one_start(run: Launched) -> None:
    assert run.of("second") == [2.0, 2.0]
    assert run.of("after end") == [2.0, 2.0]  # Accelerate destroys the group in end_training: this failed there
    assert run.of("again") == [2.0, 2.0]


def test_a_configuration_that_differs_between_processes_is_refused_on_every_process(run: Launched) -> None:
    messages = run.of("differs")
    assert messages[0] == messages[1]
    assert "rank 1 has mixed_precision='bf16' where rank 0 has 'fp16'" in messages[0]
