"""The Accelerator: its constructor options and its method groups, one file each.

The wrappers it puts around a script's objects live in accel.training and accel.data; they are
re-exported here for code that imports them from this package.

The modules, by job:

* the class: accelerator.py (`Accelerator`, assembled from the mixins below: its constructor,
  `end_training`), options.py (each constructor keyword checked against its ACCEL_* variable, and
  the precision backend and parallelism strategy chosen from them), training_views.py (the device,
  the precision that runs and what it reports, the accumulation state, `save_iteration`),
  memory_methods.py (`init_module`, `free_memory` / `clear`);
* the training loop: training_step.py (`backward`, `autocast`, `accumulate`, `unscale_gradients`,
  `clip_grad_norm_`, `clip_grad_value_`);
* preparing: preparing.py (`prepare` and its per-kind `prepare_*` methods), prepare_checks.py (the
  checks `prepare` makes on optimizers: one wrapper each, none that trains nothing prepared);
* the processes: process_methods.py (where this process stands, the collectives, `main_process_first`
  and the `on_*_process` decorators), synchronizing.py (`no_sync`, `join_uneven_inputs`, the
  `set_trigger` / `check_trigger` flag, `profile`), parallel_views.py (this process's rank in each
  mesh dimension, and the DeepSpeed engine and config);
* files: files.py (`unwrap_model`, `save_model`, `save`, `save_state` / `load_state` and their
  pre-hooks, `register_for_checkpointing`);
* watching the run: tracking_methods.py (`log_with=`, `init_trackers`, `log`, `get_tracker`),
  monitoring_methods.py (the throughput/MFU and loss-spike monitors, built when asked for);
* Accelerate's read-only views: data_options.py (the dataloader options in force, and
  `skip_first_batches`), handler_views.py
  (the kwargs handlers in effect: `ddp_handler`, `fp8_recipe_handler`, ...), private_views.py
  (`_models`, `_optimizers`, ... as views of the registry of prepared objects).
"""

from accel.accelerator.accelerator import Accelerator
from accel.data.configuration import DataLoaderConfiguration
from accel.data.loader import PreparedDataLoader
from accel.training.accumulation import GradientAccumulationPlugin
from accel.training.optimizer import AcceleratedOptimizer
from accel.training.scheduler import AcceleratedScheduler

__all__ = [
    "AcceleratedOptimizer",
    "AcceleratedScheduler",
    "Accelerator",
    "DataLoaderConfiguration",
    "GradientAccumulationPlugin",
    "PreparedDataLoader",
]
