"""Training through DeepSpeed's ZeRO engine, as Accelerate runs it (docs/deepspeed.md).

DeepSpeed itself is imported only where an engine is built or saved. The modules, by job:

* the options: plugin.py (`DeepSpeedPlugin`: Accelerate's names and fields), environment.py (the
  plugin `accel launch --use_deepspeed` describes), options.py (the Accelerator's checks at
  construction: precision, accumulation, what cannot run with DeepSpeed), config.py (the config
  `deepspeed.initialize` gets, its "auto" values filled);
* training: strategy.py (`DeepSpeedStrategy`; the interface is accel.parallel.strategy), prepare.py
  (one `prepare` call through `deepspeed.initialize`), engine.py (the engine, optimizer and
  scheduler wrappers: the engine steps in `backward`), dummies.py (`DummyOptim`, `DummyScheduler`:
  stand-ins for the optimizer and scheduler the config names);
* sequence parallelism: ulysses.py (DeepSpeed's Ulysses for sp_backend 'deepspeed': its attention wrapper and
  groups, its dataloader adapter);
* checkpoints: checkpoint.py (DeepSpeed's checkpoints inside accel's, and the engine's full weights).
"""

from accel.deepspeed.dummies import DummyOptim, DummyScheduler
from accel.deepspeed.engine import DeepSpeedEngineWrapper, DeepSpeedOptimizerWrapper, DeepSpeedSchedulerWrapper
from accel.deepspeed.plugin import DeepSpeedPlugin

__all__ = [
    "DeepSpeedEngineWrapper",
    "DeepSpeedOptimizerWrapper",
    "DeepSpeedPlugin",
    "DeepSpeedSchedulerWrapper",
    "DummyOptim",
    "DummyScheduler",
]
