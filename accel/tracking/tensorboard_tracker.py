"""TensorBoard: event files written by torch.utils.tensorboard's SummaryWriter (or tensorboardX)."""

from __future__ import annotations

import os
import time
from typing import Any

import yaml

from accel.tracking.base import GeneralTracker, on_main_process
from accel.tracking.requirements import install_hint, installed
from accel.tracking.values import as_scalar


class TensorBoardTracker(GeneralTracker):
    """Writes event files to `logging_dir/run_name` (Accelerate's layout).

    Args:
        run_name: the run's folder name (the `project_name` of `init_trackers`).
        logging_dir: the folder holding every run.
        **kwargs: passed to `SummaryWriter(...)`, e.g. `flush_secs`.
    """

    name = "tensorboard"
    requires_logging_directory = True

    def __init__(self, run_name: str, logging_dir: str | os.PathLike[str], **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.logging_dir_param = logging_dir
        self.logging_dir = os.path.join(logging_dir, run_name)
        self.init_kwargs = kwargs
        self.writer: Any = None

    @staticmethod
    def missing_install() -> str | None:
        """None when a SummaryWriter can be made here, else the pip command that fixes it."""
        if installed("tensorboard") or installed("tensorboardX"):
            return None
        return install_hint("tensorboard", "tensorboard")

    @on_main_process
    def start(self) -> None:
        if installed("tensorboard"):
            from torch.utils.tensorboard import SummaryWriter
        else:
            from tensorboardX import SummaryWriter  # type: ignore[no-redef]  # the same class, from the other package
        self.writer = SummaryWriter(self.logging_dir, **self.init_kwargs)

    @property
    def tracker(self) -> Any:
        """The SummaryWriter."""
        return self.writer

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """The hyperparameters as TensorBoard hparams, and as `hparams.yml` in a timestamped subfolder."""
        self.writer.add_hparams(values, metric_dict={})
        self.writer.flush()
        folder = os.path.join(self.logging_dir, str(time.time()))
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "hparams.yml"), "w") as file:
            yaml.dump(values, file)

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Numbers (and one-element tensors) as scalars, strings as text, dicts as grouped scalars."""
        for key, value in values.items():
            if isinstance(value, str):
                self.writer.add_text(key, value, global_step=step, **kwargs)
            elif isinstance(value, dict):
                scalars = {k: as_scalar(f"{key}.{k}", v) for k, v in value.items()}
                self.writer.add_scalars(key, scalars, global_step=step, **kwargs)
            else:
                self.writer.add_scalar(key, as_scalar(key, value), global_step=step, **kwargs)
        self.writer.flush()

    @on_main_process
    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Images (arrays or tensors, HWC by default: pass dataformats= for others), one tag each."""
        for tag, images in values.items():
            self.writer.add_images(tag, images, global_step=step, **kwargs)
        self.writer.flush()

    @on_main_process
    def finish(self) -> None:
        """Close the writer (flushes the event file)."""
        self.writer.close()
