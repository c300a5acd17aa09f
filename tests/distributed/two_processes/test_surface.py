"""The Accelerator's process helpers with 2 real processes (accel launch --num_processes 2)."""

from __future__ import annotations

from launching import launch


def test_process_helpers_agree_across_two_real_processes() -> None:
    run = launch("surface_script.py")
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.of("split") == [[0, 1, 2], [3, 4]]
    assert run.of("split_padded") == [[0, 1, 2], [3, 4, 4]]
    assert run.of("split_dict") == [{"a": [0, 1], "b": [10, 11]}, {"a": [2, 3], "b": [12, 13]}]
    assert run.of("padded") == [[[1.0, 1.0], [-1.0, -1.0]], [[2.0, 2.0], [2.0, 2.0]]]
    assert run.of("padded_first")[0] == [[0.0, 0.0], [1.0, 1.0]]
    assert run.of("max") == [[2.0, 0.0]] * 2
    assert run.of("min") == [[1.0, -1.0]] * 2
    assert run.of("mean") == [[1.5, -0.5]] * 2
    assert run.of("scaled") == [[1.5, -0.5]] * 2
    assert run.of("broadcast") == [[7.0], [7.0]]
    assert run.of("on_last") == [None, "ran"]
    assert run.of("on_process") == ["ran", None]
    assert run.of("on_local") == [None, "ran"]
    assert run.of("is_last") == [False, True]
    assert run.of("distributed_type") == ["MULTI_CPU"] * 2
    assert run.of("use_distributed") == [True, True]
    assert run.of("trigger") == [True, True]
    assert run.of("trigger_again") == [False, False]
    assert run.of("joined") == [True, True]
    # Both take part in rank 0's 3 all-reduces; rank 1's last 2 all-reduce with the joined rank 0's zeros.
    assert run.of("grad") == [[[1.0, 1.0]], [[0.5, 0.5]]]
    assert run.of("synced_grad") == [[[0.5, 0.5]], [[0.5, 0.5]]]
    rng = run.of("rng")
    assert rng[0] == rng[1]
    assert run.of("done") == [True, True]
