"""Training through DeepSpeed's ZeRO engine, as Accelerate runs it (docs/deepspeed.md).

plugin.py: DeepSpeedPlugin (Accelerate's names and fields); environment.py: the plugin `accel launch
--use_deepspeed` describes; options.py: the Accelerator's checks at construction; config.py: the config
`deepspeed.initialize` gets; prepare.py: one prepare call through it; strategy.py: DeepSpeedStrategy (the
interface is accel.training.strategy); engine.py: the engine, optimizer and scheduler wrappers;
dummies.py: DummyOptim, DummyScheduler; checkpoint.py: DeepSpeed's checkpoints inside accel's.
DeepSpeed itself is imported only where an engine is built or saved.
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
