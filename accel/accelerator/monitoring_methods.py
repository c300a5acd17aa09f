"""The Accelerator's run monitors: throughput/MFU, loss spikes and the out-of-memory snapshot (accel.monitoring),
built when asked for.

Asked for with ThroughputKwargs / SpikeDetectionKwargs in `kwarg_handlers`, or with the settings
log_throughput / spike_detection / memory_snapshot_on_oom (config key, `accel launch` flag, ACCEL_
variable), which use the handlers' defaults. Off, nothing is hooked: `throughput_monitor`,
`spike_detector` and `memory_snapshot` are None.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel.kwargs_handlers import Handlers
from accel.kwargs_handlers.monitoring import SpikeDetectionKwargs, ThroughputKwargs
from accel.monitoring import LossSpikeError, Spike, SpikeDetector, ThroughputMonitor
from accel.monitoring.spikes import logger

if TYPE_CHECKING:
    from accel.monitoring.memory_snapshot import OutOfMemorySnapshot
from accel.settings import LOG_THROUGHPUT, MEMORY_SNAPSHOT_ON_OOM, SPIKE_DETECTION


class MonitoringMixin:
    """`throughput`, `throughput_monitor`, `spike_detector`, and what a spike does."""

    handlers: Handlers
    precision: Any
    process_state: Any
    project_dir: Any
    is_main_process: bool
    log: Callable[..., None]  # TrackingMixin's
    save_state: Callable[..., Path]  # FilesMixin's

    if TYPE_CHECKING:

        @property
        def trackers(self) -> list[Any]:  # TrackingMixin's
            """The running trackers."""

    def _setup_monitoring(self) -> None:
        """Build the monitors asked for; a spike checkpoint with nowhere to go raises here, at construction."""
        self.throughput_monitor: ThroughputMonitor | None = None
        """Measures throughput and MFU (ThroughputKwargs or log_throughput), else None."""
        self.spike_detector: SpikeDetector | None = None
        """Watches the loss given to backward (SpikeDetectionKwargs or spike_detection), else None."""
        self.memory_snapshot: OutOfMemorySnapshot | None = None
        """With memory_snapshot_on_oom on a CUDA run: what writes the allocator's snapshot when memory runs out."""
        if MEMORY_SNAPSHOT_ON_OOM.from_env():
            from accel.monitoring.memory_snapshot import start_snapshots

            self.memory_snapshot = start_snapshots(self.project_dir, self.process_state.process_index,
                                                   self.process_state.device)
        if self.handlers.has(ThroughputKwargs) or LOG_THROUGHPUT.from_env():
            self.throughput_monitor = ThroughputMonitor(
                self.handlers.get(ThroughputKwargs), self.process_state.device, self.precision.compute_dtype,
                self.process_state.data_parallel_size, self._log_throughput,
            )
        action = SPIKE_DETECTION.from_env()
        if self.handlers.has(SpikeDetectionKwargs) or action is not None:
            given = self.handlers.given.get(SpikeDetectionKwargs)
            options = given if isinstance(given, SpikeDetectionKwargs) else SpikeDetectionKwargs(action=action)
            self._spike_folder = self._spike_checkpoint_folder(options)
            self.spike_detector = SpikeDetector(options, self.process_state.distributed, self._on_spike)

    @property
    def throughput(self) -> dict[str, float]:
        """The last measurement window's numbers (`throughput/tokens_per_s`, `throughput/mfu`, ...); empty when
        the monitor is off or before its first window ends.

        Example: `bar.set_postfix(tokens_s=accelerator.throughput.get("throughput/tokens_per_s"))`.
        """
        return {} if self.throughput_monitor is None else self.throughput_monitor.latest

    def _log_throughput(self, values: dict[str, float], step: int) -> None:
        if self.trackers:
            self.log(values, step=step)

    def _spike_checkpoint_folder(self, options: SpikeDetectionKwargs) -> Path | None:
        if options.action != "checkpoint":
            return None
        if options.checkpoint_dir is not None:
            return Path(options.checkpoint_dir)
        if self.project_dir is None:
            raise ValueError(
                "SpikeDetectionKwargs(action='checkpoint') (or spike_detection: checkpoint) has nowhere to save: give "
                "Accelerator(project_dir=...) or SpikeDetectionKwargs(checkpoint_dir=...)."
            )
        return Path(self.project_dir) / "spikes"

    def _on_spike(self, spike: Spike) -> None:
        """Log the spike; then save a checkpoint (weights before this step's update) or stop, as asked."""
        action = self.spike_detector.options.action if self.spike_detector else "log"
        if self.is_main_process:
            logger.warning("%s (spike detection: %s).", spike.describe(), action)
        if self.trackers:
            self.log({"loss_spike": spike.loss}, step=spike.step)
        if action == "checkpoint" and self._spike_folder is not None:
            folder = self.save_state(self._spike_folder / f"spike_step_{spike.step}")
            if self.is_main_process:
                logger.warning("Saved the state before optimizer step %d's update to %s.", spike.step, folder)
        if action == "stop":
            raise LossSpikeError(
                f"Stopped: {spike.describe()}. SpikeDetectionKwargs(action='stop') (or spike_detection: stop) ends the "
                "run at a spike, before its backward and update, so the weights are those of the last good step: save "
                "them with save_state() in an except block, or use action='checkpoint' to save and go on. Raise "
                "threshold or min_rise if this loss is no spike for your run."
            )
