"""FP8 health (FP8RecipeKwargs(health_interval=N)): real native FP8 training, read back from the trackers' files."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from accel import Accelerator, FP8RecipeKwargs
from accel.backends.fp8.health import HealthMonitor, metric_name

ROLES = ("input", "weight", "grad_output")
READINGS = ("amax", "scale", "saturated", "underflowed")


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32))


def accelerator_for(tmp_path: Path, log_with: Any = ("jsonl",), **recipe: Any) -> Accelerator:
    recipe = {"backend": "native", "base_precision": "fp32", **recipe}
    return Accelerator(
        mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(**recipe)], log_with=list(log_with), project_dir=tmp_path
    )


def prepared(accelerator: Accelerator, lr: float = 1e-3) -> tuple[nn.Module, Any]:
    model = mlp()
    return accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=lr))


def train(accelerator: Accelerator, steps: int, huge_at: int | None = None) -> None:
    """`steps` optimizer steps of a small MLP; at step `huge_at` (from 1) the input is 1e4 times larger."""
    model, optimizer = prepared(accelerator)
    generator = torch.Generator().manual_seed(1)
    for step in range(1, steps + 1):
        x = torch.randn(16, 32, generator=generator)
        if step == huge_at:
            x = x * 1e4
        loss = model(x).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        accelerator.log({"loss": loss.item()}, step=step)


def records(tmp_path: Path) -> list[dict[str, Any]]:
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def health_records(tmp_path: Path) -> dict[int, dict[str, float]]:
    """The health metrics logged, by step."""
    found: dict[int, dict[str, float]] = {}
    for record in records(tmp_path):
        health = {k: v for k, v in record["values"].items() if k.startswith("fp8/")}
        if health:
            found[record["step"]] = health
    return found


def test_health_reaches_the_jsonl_and_tensorboard_files_at_the_interval(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    pytest.importorskip("matplotlib")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accelerator = accelerator_for(tmp_path, log_with=("jsonl", "tensorboard"), health_interval=2)
    accelerator.init_trackers("run")
    train(accelerator, steps=7)
    accelerator.end_training()

    logged = health_records(tmp_path)
    assert sorted(logged) == [2, 4, 6]  # the interval, on optimizer steps
    for step, values in logged.items():
        for layer in ("0", "2"):
            for role in ROLES:
                amax = values[f"fp8/{layer}/{role}_amax"]
                scale = values[f"fp8/{layer}/{role}_scale"]
                assert amax > 0 and scale > 0
                assert 0 <= values[f"fp8/{layer}/{role}_saturated"] <= 1
                assert 0 <= values[f"fp8/{layer}/{role}_underflowed"] <= 1
                assert (f"fp8/{layer}/{role}_amax_ratio" in values) is (step > 2)
        assert 0 <= values["fp8/worst_saturated"] <= 1 and 0 <= values["fp8/worst_underflowed"] <= 1
    # ordinary training: the delayed scales cover the inputs (at most the odd value saturates)
    assert all(values["fp8/worst_saturated"] < 0.01 for values in logged.values())

    events = EventAccumulator(str(tmp_path / "run"), size_guidance={"scalars": 0})
    events.Reload()
    amax = [(e.step, e.value) for e in events.Scalars("fp8/0/input_amax")]
    assert amax == [(s, pytest.approx(logged[s]["fp8/0/input_amax"])) for s in (2, 4, 6)]
    assert [e.step for e in events.Scalars("fp8/2/grad_output_underflowed")] == [2, 4, 6]

    folder = tmp_path / "run"
    assert (folder / "fp8_health.png").read_bytes()[:4] == b"\x89PNG"
    assert (folder / "metrics.png").read_bytes()[:4] == b"\x89PNG"  # the loss, without the health series


def test_a_huge_input_saturates_and_the_summary_names_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Delayed scaling casts step 4's input with the scale of steps 1-3: 1e4 times too large, it saturates."""
    accelerator = accelerator_for(tmp_path, health_interval=1)
    accelerator.init_trackers("run")
    with caplog.at_level(logging.INFO, logger="accel"):
        train(accelerator, steps=5, huge_at=4)
    accelerator.end_training()
    logged = health_records(tmp_path)
    assert sorted(logged) == [1, 2, 3, 4, 5]
    assert logged[3]["fp8/0/input_saturated"] == 0
    assert logged[4]["fp8/0/input_saturated"] > 0.5  # most of the 1e4-times larger values hit 448
    assert logged[4]["fp8/worst_saturated"] == logged[4]["fp8/0/input_saturated"]
    assert logged[4]["fp8/0/input_amax_ratio"] > 1000  # how it moved
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("FP8 health at step 4 ")]
    assert len(lines) == 1 and "worst saturation 0.input" in lines[0]


def test_a_dominant_value_makes_the_rest_underflow(tmp_path: Path) -> None:
    """Current scaling maps one 1e6 value to 448: the rest (about 1) scale below E4M3's smallest subnormal."""
    accelerator = accelerator_for(tmp_path, health_interval=1, scaling="current")
    model, optimizer = prepared(accelerator, lr=0.0)
    accelerator.init_trackers("run")
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(0))
    x[0, 0] = 1e6
    accelerator.backward(model(x).sum())
    optimizer.step()
    accelerator.end_training()
    values = health_records(tmp_path)[1]
    assert values["fp8/0/input_underflowed"] > 0.9 and values["fp8/0/input_saturated"] == 0
    assert values["fp8/0/input_amax"] == pytest.approx(1e6)


def test_off_by_default_installs_nothing_and_counts_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[HealthMonitor] = []
    monkeypatch.setattr(HealthMonitor, "__init__", lambda self, *a, **k: made.append(self))  # must not run
    accelerator = accelerator_for(tmp_path)
    precision = accelerator.precision
    assert "optimizer_step" not in vars(precision) and "convert_module" not in vars(precision)
    accelerator.init_trackers("run")
    train(accelerator, steps=3)
    accelerator.end_training()
    assert made == [] and health_records(tmp_path) == {}
    for scaler in precision.scalers.scalers.values():
        assert not scaler.count_stats and not scaler.has_counts and scaler.step_values == 0


def test_health_without_a_running_tracker_warns_once_and_logs_the_summary(caplog: pytest.LogCaptureFixture) -> None:
    accelerator = Accelerator(
        mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(backend="native", base_precision="fp32", health_interval=1)]
    )
    model, optimizer = prepared(accelerator)
    with pytest.warns(UserWarning, match="FP8 health at optimizer step 1 went to no tracker") as warned:
        with caplog.at_level(logging.INFO, logger="accel"):
            for _ in range(2):
                accelerator.backward(model(torch.randn(16, 32)).sum())
                optimizer.step()
    assert len([w for w in warned if "FP8 health" in str(w.message)]) == 1
    assert sum(r.getMessage().startswith("FP8 health at step") for r in caplog.records) == 2


def test_health_interval_is_a_setting_and_refuses_negative_values(monkeypatch: pytest.MonkeyPatch) -> None:
    from accel.settings import FP8_SETTINGS_BY_KEY

    setting = FP8_SETTINGS_BY_KEY["health_interval"]
    assert setting.name == "fp8_health_interval" and setting.default == 0
    with pytest.raises(ValueError, match=r"health_interval=-1 must be an int >= 0"):
        FP8RecipeKwargs(health_interval=-1)


def test_msamp_refuses_health_with_the_reason() -> None:
    from accel.backends.fp8.msamp import MSAMPFP8

    assert "per-layer FP8 statistics" in MSAMPFP8.refusals["health_interval"]


def test_metric_names() -> None:
    assert metric_name("blocks.0.fc1.input", "amax") == "fp8/blocks.0.fc1/input_amax"
    assert metric_name("fc1.weight_grad", "scale") == "fp8/fc1/weight_grad_scale"


# ----------------------------------------------------------------------------- te and ao: what they expose
def test_te_reports_amax_and_scale_from_its_fp8_meta(tmp_path: Path, fake_te: Any, fp8_gpu: Any) -> None:
    """TE keeps, per module, an amax history (history x tensors) and a scale per forward tensor (input, weight,
    output) and backward tensor (grad_output, grad_input); the stand-in holds what TE's modules hold there."""
    from types import SimpleNamespace

    fake_te.install()
    accelerator = accelerator_for(tmp_path, backend="te", health_interval=1)
    model, optimizer = prepared(accelerator)
    history = torch.tensor([[1.0, 0.5, 9.0], [2.0, 0.25, 9.0]])  # input amax 2 (the window's largest), weight 0.5
    model[0].fp8_meta = {
        "scaling_fwd": SimpleNamespace(amax_history=history, scale=torch.tensor([224.0, 896.0, 1.0])),
        "scaling_bwd": SimpleNamespace(amax_history=torch.tensor([[1e-3, 5.0]]), scale=torch.tensor([57344e3, 1.0])),
        "recipe": None,
    }
    accelerator.init_trackers("run")
    accelerator.backward(model(torch.randn(16, 32)).sum())
    optimizer.step()
    accelerator.end_training()
    values = health_records(tmp_path)[1]
    assert values == {
        "fp8/0/input_amax": 2.0, "fp8/0/input_scale": 224.0,
        "fp8/0/weight_amax": 0.5, "fp8/0/weight_scale": 896.0,
        "fp8/0/grad_output_amax": pytest.approx(1e-3), "fp8/0/grad_output_scale": 57344e3,
    }  # no fractions (TE counts none), and module 2, with no delayed-scaling state, gives nothing


def test_ao_reports_its_weights_amax_scale_and_fractions(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("torchao.float8", reason="torchao is not installed (pip install torchao)")
    accelerator = accelerator_for(tmp_path, backend="ao", health_interval=1)
    model, optimizer = prepared(accelerator, lr=0.0)  # the weights stay as set (the huge one would move them)
    with torch.no_grad():
        model[0].weight[0, 0] = 1e6  # one dominant weight: the rest of its tensor flushes under tensorwise scaling
    accelerator.init_trackers("run")
    with caplog.at_level(logging.INFO, logger="accel"):
        accelerator.backward(model(torch.randn(16, 32)).sum())
        optimizer.step()
    accelerator.end_training()
    values = health_records(tmp_path)[1]
    weight = model[0].weight.detach()
    amax = float(weight.abs().max())
    assert values["fp8/0/weight_amax"] == pytest.approx(amax)
    assert values["fp8/0/weight_scale"] == pytest.approx(448.0 / amax)
    assert values["fp8/0/weight_saturated"] == 0 and values["fp8/0/weight_underflowed"] > 0.9
    assert 0 <= values["fp8/2/weight_underflowed"] < 0.01
    assert not any("input" in key or "grad_output" in key for key in values)
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("FP8 health at step 1 ")]
    assert "Not reported: the inputs and output gradients" in line


def test_under_ddp_only_the_main_process_counts_and_reports(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parents[2] / "distributed" / "two_processes"))
    from launching import launch

    done = launch(str(Path(__file__).with_name("health_ddp_script.py")), str(tmp_path), processes=2, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.of("wrapped") == [True, False]
    assert done.of("counted") == [[False, True, True, True], [False] * 4]
    assert sorted(health_records(tmp_path)) == [2, 4]  # one writer: each report once
