"""Run monitors: throughput and MFU (throughput.py, peaks.py, cpu_peak.py, inputs.py), loss spikes (spikes.py) and
the CUDA memory snapshot written when a process runs out of memory (memory_snapshot.py, loaded only when asked for).

The Accelerator builds them (accel/accelerator/monitoring_methods.py) when asked for with
ThroughputKwargs / SpikeDetectionKwargs or the settings log_throughput / spike_detection /
memory_snapshot_on_oom.
"""

from accel.monitoring.spikes import LossSpikeError, Spike, SpikeDetector
from accel.monitoring.throughput import ThroughputMonitor

__all__ = ["LossSpikeError", "Spike", "SpikeDetector", "ThroughputMonitor"]
