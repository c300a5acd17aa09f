"""Run monitors: throughput and MFU (throughput.py, peaks.py, cpu_peak.py, inputs.py) and loss spikes (spikes.py).

The Accelerator builds them (accel/accelerator/monitoring_methods.py) when asked for with
ThroughputKwargs / SpikeDetectionKwargs or the settings log_throughput / spike_detection.
"""

from accel.monitoring.spikes import LossSpikeError, Spike, SpikeDetector
from accel.monitoring.throughput import ThroughputMonitor

__all__ = ["LossSpikeError", "Spike", "SpikeDetector", "ThroughputMonitor"]
