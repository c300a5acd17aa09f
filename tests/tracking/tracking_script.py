"""Launched on 2 processes by tests/accelerator/test_tracking.py: only the main process may write.

argv: the project folder. Each rank reports what it sees; the test reads the files afterwards.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from launching import report  # noqa: E402

from accel import Accelerator  # noqa: E402
from accel.tracking import GeneralTracker  # noqa: E402

accelerator = Accelerator(log_with=["jsonl", "tensorboard"], project_dir=sys.argv[1])
accelerator.init_trackers(
    "proj", config={"world": accelerator.num_processes}, init_kwargs={"jsonl": {"plot": False}}
)
for step in range(3):
    accelerator.log({"rank": accelerator.process_index, "step_value": float(step)}, step=step)
tracker = accelerator.get_tracker("jsonl")
report("trackers", [t.name for t in accelerator.trackers])
report("jsonl_tracker", type(tracker).__name__)
report("blank", type(tracker) is GeneralTracker)
report("logging_dir", str(accelerator.logging_dir))
accelerator.end_training()
report("done", True)
