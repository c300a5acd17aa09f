"""`accel bench` end to end on a tiny model given through the `--model` hook: the table, the CSV,
the chart, skipped precisions, compiled rows, and bad hooks refused in one line."""

from __future__ import annotations

import csv
import importlib.util
import math
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from accel.cli.main import main

TINY_HOOK = textwrap.dedent(
    """
    import torch
    from torch import nn

    def make():
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))

        def batch_fn(step):
            generator = torch.Generator().manual_seed(step)
            return torch.randn(8, 16, generator=generator), torch.randint(16, (8,), generator=generator)

        return model, batch_fn
    """
)


@pytest.fixture
def hook(tmp_path: Path) -> str:
    path = tmp_path / "tiny_model.py"
    path.write_text(TINY_HOOK)
    return f"{path}:make"


def _bench(tmp_path: Path, *flags: str) -> int:
    return main(["bench", "--steps", "3", "--warmup", "1", "--no_progress", "--output_dir", str(tmp_path / "out"), *flags])


def _csv(tmp_path: Path) -> dict[tuple[str, str], dict[str, str]]:
    with (tmp_path / "out" / "bench.csv").open() as handle:
        return {(line["case"], line["mode"]): line for line in csv.DictReader(handle)}


def _hand_written_fp32_losses(hook: str, steps: int) -> list[float]:
    """The same training written by hand: what the fp32 row must report."""
    path, _, name = hook.rpartition(":")
    spec = importlib.util.spec_from_file_location("tiny_model_by_hand", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    model, batch_fn = getattr(module, name)()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-6)
    losses = []
    for step in range(steps):
        inputs, targets = batch_fn(step)
        loss = F.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def test_bench_a_hook_model_in_several_precisions(tmp_path: Path, hook: str, capsys: pytest.CaptureFixture[str]) -> None:
    """fp32 (the reference, added when not asked) matches a hand-written loop; bf16 runs and says so;
    a precision that cannot run here is a skipped row with the reason, and the run goes on."""
    status = _bench(tmp_path, "--model", hook, "--precisions", "bf16,fp8-msamp", "--no_compile")
    out = capsys.readouterr().out
    assert status == 0, out
    rows = _csv(tmp_path)
    assert list(rows) == [("fp32", "eager"), ("bf16", "eager"), ("fp8-msamp", "eager")]
    fp32, bf16, msamp = rows.values()
    assert fp32["status"] == "ran" and fp32["ran"] == "fp32 (no mixed precision)"
    assert bf16["status"] == "ran" and bf16["ran"] == "bf16"
    expected = _hand_written_fp32_losses(hook, 3)
    assert [float(v) for v in fp32["losses"].split()] == pytest.approx(expected, rel=1e-5)
    assert float(bf16["loss"]) == pytest.approx(expected[-1], rel=0.05)
    for row in (fp32, bf16):
        assert float(row["step_ms"]) > 0 and float(row["cpu_ms"]) > 0 and float(row["tokens_per_s"]) > 0
        assert float(row["bytes_per_param"]) == pytest.approx(12.0, abs=0.1)  # fp32 weight + AdamW's two moments
    assert msamp["status"] == "skipped" and "MS-AMP" in msamp["note"] and msamp["step_ms"] == ""
    assert "skipped [1]" in out and "[1] FP8RecipeKwargs(backend='msamp') cannot run here" in out
    # 3 steps, 1 warm-up: 2 timed rounds are too few to recommend another precision than fp32
    too_few = "No precision is clearly faster than fp32 eager here" in out and "too few to tell" in out
    fp32_fastest = "Recommended: fp32 (eager): no other precision whose loss stays within 2% of it ran faster here." in out
    too_busy = "No recommendation: the machine was too busy for these step times." in out
    assert [too_few, fp32_fastest, too_busy].count(True) == 1, out
    assert (tmp_path / "out" / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_compiled_rows_train_the_same_model(tmp_path: Path, hook: str) -> None:
    """The compiled row runs torch.compile through Accelerator(dynamo_backend=...) and learns as eager does."""
    assert _bench(tmp_path, "--model", hook, "--precisions", "fp32") == 0
    rows = _csv(tmp_path)
    eager, compiled = rows[("fp32", "eager")], rows[("fp32", "compiled")]
    assert compiled["status"] == "ran", compiled["note"]
    assert float(compiled["first_step_s"]) > float(compiled["step_ms"]) / 1e3  # the first step compiled
    eager_losses = [float(v) for v in eager["losses"].split()]
    assert [float(v) for v in compiled["losses"].split()] == pytest.approx(eager_losses, rel=1e-4)


BAD_HOOKS = [
    pytest.param("def make():\n    return 3\n", "returned an int; it must return (model, batch_fn)", id="not-a-tuple"),
    pytest.param(
        "import torch\ndef make():\n    return torch.nn.Linear(2, 2), 'data'\n",
        "returned (a Linear module, a str); it must return", id="batch-fn-not-callable",
    ),
    pytest.param(
        "import torch\ndef make():\n    return torch.nn.Linear(2, 2), lambda step: torch.zeros(2)\n",
        "batch_fn(0) returned a tensor of shape (2,); it must return (inputs, targets), two tensors", id="bad-batch",
    ),
]


@pytest.mark.parametrize(("source", "expected"), BAD_HOOKS)
def test_a_bad_hook_is_one_line_naming_what_came_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str, expected: str
) -> None:
    (tmp_path / "bad.py").write_text(source)
    assert _bench(tmp_path, "--model", f"{tmp_path / 'bad.py'}:make", "--no_compile") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("accel bench: --model ") and expected in err
    assert "\n" not in err and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--precisions", "bf17"], "--precisions='bf17' is not accepted"),
        (["--steps", "0"], "--steps 0: give at least 1 step"),
        (["--warmup", "3"], "--warmup 3: give 0 up to --steps - 1 (2)"),
        (["--tolerance", "-1"], "--tolerance -1.0: give a relative gap >= 0"),
    ],
)
def test_bad_flags_are_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], expected: str
) -> None:
    assert _bench(tmp_path, *flags) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("accel bench: ") and expected in err and "\n" not in err


def test_a_failing_case_is_a_row_and_the_run_goes_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A loss function that breaks on half-precision outputs fails that row only."""
    (tmp_path / "picky.py").write_text(TINY_HOOK + textwrap.dedent(
        """
        def make_picky():
            model, batch_fn = make()

            def loss_fn(outputs, targets):
                if outputs.dtype != torch.float32:
                    raise TypeError(f"this loss takes float32, got {outputs.dtype}")
                return torch.nn.functional.cross_entropy(outputs, targets)

            return model, batch_fn, loss_fn
        """
    ))
    hook = f"{tmp_path / 'picky.py'}:make_picky"
    assert _bench(tmp_path, "--model", hook, "--precisions", "fp32,bf16-true", "--no_compile") == 0
    rows = _csv(tmp_path)
    assert rows[("fp32", "eager")]["status"] == "ran"
    failed = rows[("bf16-true", "eager")]
    assert failed["status"] == "failed" and "TypeError: this loss takes float32, got torch.bfloat16" in failed["note"]
    assert math.isfinite(float(rows[("fp32", "eager")]["loss"]))
