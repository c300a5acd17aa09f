"""TensorBoard: what the tracker logs, read back from the event files with tensorboard's own reader."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

pytest.importorskip("tensorboard", reason='TensorBoard is an optional extra: pip install "accel[tensorboard]"')

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from accel.tracking import TensorBoardTracker  # noqa: E402


def test_scalars_text_and_hparams_land_in_the_event_files(tmp_path: Path) -> None:
    tracker = TensorBoardTracker("run", tmp_path, flush_secs=1)
    tracker.start()
    tracker.store_init_configuration({"lr": 0.01, "optimizer": "adamw"})
    for step in range(3):
        tracker.log({"loss": 1.0 / (step + 1), "grad_norm": torch.tensor(float(step))}, step=step)
    tracker.log({"note": "done", "eval": {"a": 1.0, "b": 2.0}}, step=3)
    tracker.finish()

    events = EventAccumulator(str(tmp_path / "run"), size_guidance={"tensors": 0, "scalars": 0})
    events.Reload()
    loss = [(e.step, e.value) for e in events.Scalars("loss")]
    assert loss == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3))]
    assert [(e.step, e.value) for e in events.Scalars("grad_norm")] == [(0, 0.0), (1, 1.0), (2, 2.0)]
    (text,) = events.Tensors("note/text_summary")
    assert text.step == 3 and text.tensor_proto.string_val == [b"done"]

    run_dirs = {p.name for p in (tmp_path / "run").iterdir() if p.is_dir()}
    hparams = [p for p in (tmp_path / "run").glob("*/hparams.yml")]
    assert len(hparams) == 1 and yaml.safe_load(hparams[0].read_text()) == {"lr": 0.01, "optimizer": "adamw"}
    assert any(name.startswith("eval_") for name in run_dirs)  # add_scalars writes one folder per series
    grouped = EventAccumulator(str(tmp_path / "run" / "eval_a"))
    grouped.Reload()
    assert [(e.step, e.value) for e in grouped.Scalars("eval")] == [(3, 1.0)]


def test_a_value_tensorboard_cannot_show_raises_naming_the_key(tmp_path: Path) -> None:
    tracker = TensorBoardTracker("run", tmp_path)
    tracker.start()
    with pytest.raises(TypeError, match="weights"):
        tracker.log({"weights": torch.ones(2)}, step=0)
    tracker.finish()


def test_images_land_in_the_event_files(tmp_path: Path) -> None:
    tracker = TensorBoardTracker("run", tmp_path)
    tracker.start()
    tracker.log_images({"samples": torch.rand(2, 8, 8, 3)}, step=3, dataformats="NHWC")
    tracker.finish()
    events = EventAccumulator(str(tmp_path / "run"), size_guidance={"images": 0})
    events.Reload()
    images = events.Images("samples")
    assert [(image.step, image.width, image.height) for image in images] == [(3, 16, 8)]  # a grid of the 2
