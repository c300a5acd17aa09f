"""accel.bench's parts on their own: case selection, the hook's checks, the default workload, the
recommendation and the CSV."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from accel.bench.cases import CASE_NAMES, build_accelerator, select_cases
from accel.bench.report import recommend, write_csv
from accel.bench.run import Row
from accel.bench.workload import HookError, check_batch, check_hook_result, gpt_workload, load_hook


def test_select_cases_keeps_table_order_and_refuses_unknown_names_with_closest_match() -> None:
    assert [c.name for c in select_cases(["bf16", "FP32"])] == ["fp32", "bf16"]
    with pytest.raises(ValueError, match=r"--precisions='bf17' is not accepted.*Did you mean 'bf16'\?"):
        select_cases(["bf17"])


def test_every_case_builds_an_accelerator_or_says_why_not() -> None:
    """A case the Accelerator refuses comes back with the refusal, never an exception."""
    for case in select_cases(list(CASE_NAMES)):
        notes: list[str] = []
        accelerator, reason = build_accelerator(case, "eager", notes)
        assert (accelerator is None) != (reason is None), case.name
        if accelerator is not None:
            assert accelerator.mixed_precision == case.mixed_precision
            accelerator.end_training()
        else:
            assert "cannot run here" in reason, (case.name, reason)


def test_gpt_workload_gives_fixed_batches_of_token_windows() -> None:
    work = gpt_workload(steps=3, batch_size=2, seed=0)
    again = gpt_workload(steps=3, batch_size=2, seed=0)
    assert len(work.batches) == 3
    inputs, targets = work.batches[0]
    assert inputs.shape == targets.shape == (2, 64) and inputs.dtype == torch.long
    assert torch.equal(inputs[:, 1:], targets[:, :-1])  # next-token targets
    assert all(torch.equal(a[0], b[0]) for a, b in zip(work.batches, again.batches, strict=True))
    assert work.tokens_per_step == 2 * 64
    assert torch.equal(next(work.model.parameters()), next(again.model.parameters()))


@pytest.mark.parametrize(
    ("returned", "expected"),
    [
        (nn.Linear(2, 2), r"returned a Linear module; it must return \(model, batch_fn\)"),
        ((nn.Linear(2, 2),), r"returned a tuple of 1 \(a Linear module\)"),
        ((lambda s: s, nn.Linear(2, 2)), r"returned \(a function '<lambda>', a Linear module\)"),
        ((nn.Linear(2, 2), lambda s: s, "mse"), r"returned \(a Linear module, a function '<lambda>', a str\)"),
        (None, "returned None"),
    ],
)
def test_a_hook_returning_the_wrong_thing_is_named_in_one_line(returned: object, expected: str) -> None:
    with pytest.raises(HookError, match=expected) as caught:
        check_hook_result("m.py:make", returned)
    assert "\n" not in str(caught.value)


def test_a_batch_that_is_not_two_tensors_is_named() -> None:
    with pytest.raises(HookError, match=r"batch_fn\(0\) returned a tensor of shape \(2, 3\); it must return"):
        check_batch("m.py:make", 0, torch.zeros(2, 3))


def test_load_hook_names_a_missing_file_or_function(tmp_path: Path) -> None:
    with pytest.raises(HookError, match="give the hook as path/to/file.py:function"):
        load_hook("model.py")
    with pytest.raises(HookError, match="no file"):
        load_hook(str(tmp_path / "absent.py") + ":make")
    (tmp_path / "m.py").write_text("make = 3\n")
    with pytest.raises(HookError, match="defines an int named 'make', not a function"):
        load_hook(f"{tmp_path / 'm.py'}:make")


def _row(case: str, mode: str, step_ms: float, loss: float, status: str = "ran", spread: float = 0.0,
         speedups: list[float] | None = None) -> Row:
    """A row that ran; its round-by-round speed-ups against fp32 are all 10 / step_ms unless given."""
    rounds = [10.0 / step_ms] * 6 if speedups is None else speedups
    return Row(case, mode, status=status, ran=case, step_ms=step_ms, loss=loss, losses=[loss], spread=spread,
               speedups=rounds)


def test_recommend_the_fastest_row_within_the_tolerance_of_fp32() -> None:
    rows = [
        _row("fp32", "eager", 10.0, 2.00),
        _row("bf16", "eager", 8.0, 2.03),  # 1.5% off: within 2%
        _row("fp8-native-O2", "eager", 5.0, 2.10),  # fastest, but 5% off
        _row("16-true", "eager", 1.0, math.nan),  # diverged
        Row("fp8-te", "eager", note="cannot run here"),
    ]
    chosen = recommend(rows, tolerance=0.02)
    assert chosen.row is not None and chosen.row.case == "bf16"
    assert "1.25x, the median of 6 interleaved rounds against fp32 eager" in chosen.text()
    assert recommend(rows, tolerance=0.10).row.case == "fp8-native-O2"
    assert recommend(rows[1:], tolerance=0.5).row is None  # no fp32 row to compare with
    assert "did not run" in recommend(rows[1:], tolerance=0.5).text()


def test_csv_has_a_line_per_row_with_every_loss_and_speed_up(tmp_path: Path) -> None:
    rows = [_row("fp32", "eager", 10.0, 2.0), Row("fp8-te", "eager", note="cannot run here")]
    rows[0].losses = [3.0, 2.5, 2.0]
    rows[0].speedups = [1.0, 1.0]
    write_csv(rows, tmp_path / "bench.csv")
    with (tmp_path / "bench.csv").open() as handle:
        written = list(csv.DictReader(handle))
    assert [line["case"] for line in written] == ["fp32", "fp8-te"]
    assert written[0]["losses"] == "3 2.5 2" and written[0]["speedups"] == "1 1"
    assert written[1]["status"] == "skipped" and written[1]["note"] == "cannot run here" and written[1]["losses"] == ""


def test_only_a_gain_in_three_rounds_of_four_is_recommended() -> None:
    """On a loaded machine a row can look faster in a few rounds: only a gain that holds in most rounds counts."""
    reference = _row("fp32", "eager", 10.0, 2.0, speedups=[1.0] * 8)
    steady = _row("bf16", "eager", 9.0, 2.0, speedups=[1.1, 1.12, 1.09, 1.11, 1.1, 1.1, 1.08, 1.11])
    assert recommend([reference, steady], tolerance=0.02).row is steady
    mostly = _row("bf16", "eager", 9.0, 2.0, speedups=[1.1, 1.12, 0.8, 1.11, 1.1, 1.1, 0.9, 1.11])  # 6 of 8
    assert recommend([reference, mostly], tolerance=0.02).row is mostly
    # the median says 1.25x, but three rounds in eight were not 5% faster
    lucky = _row("bf16", "eager", 8.0, 2.0, speedups=[1.3, 1.25, 0.9, 1.4, 0.95, 1.25, 1.04, 1.3])
    verdict = recommend([reference, lucky], tolerance=0.02)
    assert verdict.row is None and verdict.fastest is lucky
    assert verdict.text() == (
        "No precision is clearly faster than fp32 eager here: the fastest, bf16 (eager), is 1.25x, the median of 8 "
        "interleaved rounds, but it was not more than 5% faster in three rounds of four."
    )
    small = _row("bf16", "eager", 9.8, 2.0, speedups=[1.02] * 8)
    assert recommend([reference, small], tolerance=0.02).row is None  # 2% is below the 5% a gain must reach
    few = _row("bf16", "eager", 5.0, 2.0, speedups=[2.0, 2.0])
    assert "2 timed rounds are too few to tell (give --steps of at least --warmup + 4)" in recommend(
        [reference, few], tolerance=0.02).text()


def test_a_busy_machine_is_named() -> None:
    reference = _row("fp32", "eager", 10.0, 2.0, spread=0.2, speedups=[1.0] * 8)
    clear = _row("bf16", "eager", 2.0, 2.0, spread=0.1, speedups=[5.0] * 8)
    verdict = recommend([reference, clear], tolerance=0.02)
    assert verdict.row is clear  # 5x in every round is clear even on a busy machine
    assert verdict.text().endswith("The machine was busy: fp32's steps varied by +-20%, so these step times cannot "
                                   "decide between close rows; run again on a quiet machine (or with OMP_NUM_THREADS=1).")


def test_when_fp32_itself_is_fastest_the_text_says_so_without_a_speed_up() -> None:
    rows = [_row("fp32", "eager", 10.0, 2.0, spread=0.01), _row("bf16", "eager", 12.0, 2.0, spread=0.01)]
    verdict = recommend(rows, tolerance=0.02)
    assert verdict.row is rows[0]
    assert verdict.text() == "Recommended: fp32 (eager): no other precision whose loss stays within 2% of it ran faster here."


def test_step_spread_is_half_the_interquartile_range_over_the_median() -> None:
    from accel.bench.run import step_spread

    assert step_spread([1.0]) == 0.0
    assert step_spread([1.0, 1.0, 1.0, 1.0]) == 0.0
    assert step_spread([0.9, 1.0, 1.0, 1.1]) == pytest.approx(0.025)


def test_the_chart_shows_each_rows_loss_against_fp32s(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from accel.bench.report import write_chart

    rows = [_row("fp32", "eager", 10.0, 2.0), _row("bf16", "eager", 8.0, 2.01), _row("16-true", "eager", 7.0, math.nan)]
    rows[0].losses, rows[1].losses, rows[2].losses = [3.0, 2.0], [3.01, 2.01], [3.0, math.nan]
    assert write_chart(rows, tmp_path / "bench.png", "test") is None
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_diverging_row_does_not_flatten_the_others_loss_differences() -> None:
    """16-true's loss reached 139 before its NaN: the axis fits the rows that stayed finite, the diverging one leaves it."""
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from accel.bench.report import _plot_loss_differences

    rows = [_row("fp32", "eager", 10.0, 2.0), _row("bf16", "eager", 8.0, 2.01), _row("16-true", "eager", 7.0, math.nan)]
    rows[0].losses, rows[1].losses, rows[2].losses = [3.0, 2.0, 1.5], [3.01, 2.01, 1.49], [3.0, 139.0, math.nan]
    figure, axes = plt.subplots()
    _plot_loss_differences(axes, rows[0], rows, ["fp32 (eager)", "bf16 (eager)", "16-true (eager)"])
    assert axes.get_ylim() == pytest.approx((-0.012, 0.012))  # 1.2 x bf16's largest difference, 0.01
    assert [text.get_text() for text in axes.legend().get_texts()][-1] == "16-true (eager) (leaves the chart)"
    plt.close(figure)


def test_a_cpu_whose_cores_other_programs_took_gives_no_recommendation() -> None:
    """Beside two busy loops on 2 cores, fp32 stepped 40x slower and native FP8 30x: the order was the load's."""
    reference = _row("fp32", "eager", 3761.6, 2.0, speedups=[1.0] * 6)
    fp8 = _row("fp8-native-O1", "eager", 2790.4, 2.0, speedups=[1.35] * 6)
    reference.cpu_share = 0.66
    verdict = recommend([reference, fp8], tolerance=0.02)
    assert verdict.row is None
    assert verdict.text().startswith("No recommendation: the machine was too busy for these step times. The process "
                                     "ran 66% of the time fp32 eager's steps took (alone on its cores, at least 100%)")
    reference.cpu_share = 1.2  # two threads, alone: more CPU time than wall time
    assert recommend([reference, fp8], tolerance=0.02).row is fp8
