"""Accelerator: prepares a training script's objects and runs them in the asked precision."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from accel import checkpointing
from accel._validation import check_bool
from accel.accelerator import options
from accel.accelerator.data_options import DataOptionsMixin
from accel.accelerator.files import FilesMixin
from accel.accelerator.handler_views import HandlerViewsMixin
from accel.accelerator.memory_methods import MemoryMixin
from accel.accelerator.monitoring_methods import MonitoringMixin
from accel.accelerator.parallel_views import ParallelViewsMixin
from accel.accelerator.preparing import PrepareMixin
from accel.accelerator.private_views import PrivateViewsMixin
from accel.accelerator.process_methods import ProcessMixin
from accel.accelerator.synchronizing import SyncMixin
from accel.accelerator.tracking_methods import TrackingMixin
from accel.accelerator.training_step import TrainingStepMixin
from accel.accelerator.training_views import TrainingViewsMixin
from accel.backends.base import PrecisionBackend
from accel.backends.names import resolve_precision
from accel.data.configuration import DataLoaderConfiguration
from accel.data.loader_options import check_dataloader_config
from accel.deepspeed import DeepSpeedPlugin
from accel.deepspeed import options as ds_options
from accel.distributed import process_group as distributed
from accel.distributed.partial_state import AcceleratorState
from accel.distributed.process_state import ProcessState
from accel.fsdp import FullyShardedDataParallelPlugin
from accel.kwargs_handlers import (
    InitProcessGroupKwargs,
    KwargsHandler,
    collect_handlers,
)
from accel.kwargs_handlers.dynamo import TorchDynamoPlugin
from accel.kwargs_handlers.tensor_parallel import TorchTensorParallelPlugin
from accel.parallel import layout
from accel.parallel.choice import create_strategy
from accel.parallel.config import ParallelismConfig
from accel.parallel.strategy import ParallelStrategy
from accel.quantization import Quantizer, create_quantizer
from accel.settings import (
    ACTIVATION_CHECKPOINTING,
    GRADIENT_ACCUMULATION_STEPS,
    MIXED_PRECISION,
    SCHEDULER_PER_OPTIMIZER_STEP,
    USE_CPU,
)
from accel.settings.environment import check_environment
from accel.tracking.selection import LogWith
from accel.training import compiling
from accel.training.accumulation import GradientAccumulationPlugin
from accel.training.gradient_state import GradientState
from accel.training.prepared import PreparedObjects


class Accelerator(
    TrainingStepMixin, PrepareMixin, PrivateViewsMixin, HandlerViewsMixin, TrackingMixin, FilesMixin, SyncMixin,
    DataOptionsMixin, ProcessMixin, ParallelViewsMixin, MonitoringMixin, TrainingViewsMixin, MemoryMixin,
):
    """Prepares a model, optimizer, dataloader and scheduler to train in one precision.

    Accelerate's names and meanings: a script written for `accelerate.Accelerator` runs after changing
    the import. An argument left as None is read from its `ACCEL_*` environment variable (set by
    `accel launch`) or Accelerate's `ACCELERATE_*` one (set by `accelerate launch`; the two disagreeing
    is refused), else takes its default. An argument given in the code wins over its variable, with a
    warning when they differ. Every value is checked here, at construction, never later in the
    training loop: a value of the wrong kind (a str for a bool, a float for an int) raises
    `ArgumentTypeError`, both a TypeError and a ValueError; a value of the right kind out of range, or
    two arguments that contradict each other, raise ValueError naming both, what is accepted and the
    closest match. Keyword arguments only (positional ones raise TypeError saying how to name them).

    Where accel differs from Accelerate: what was asked runs or the constructor says why it cannot
    (fp16 on a CPU really autocasts and scales the loss; Accelerate silently runs fp32 there), and a
    tracker or backend whose library is missing raises instead of being skipped.

    The methods live by concern: training_step.py (backward, autocast, accumulate, clipping),
    preparing.py (prepare and prepare_*), process_methods.py
    (collectives, on_* decorators), synchronizing.py (no_sync, join, triggers), files.py (model files,
    checkpoints), tracking_methods.py (trackers), data_options.py (the dataloader options),
    training_views.py (the device, precision and accumulation state), memory_methods.py (init_module,
    free_memory), private_views.py (Accelerate's `_models` and the like). What was prepared is `self.prepared`;
    how models are spread over the processes is `self.strategy` (accel.parallel.strategy), chosen
    here once.

    Args:
        mixed_precision: The precision to train in: `"no"` (fp32), `"fp16"` or `"bf16"` (mixed:
            float32 weights, the forward under torch.autocast, the loss scaled for fp16), `"fp8"`
            (the backend and recipe from an `FP8RecipeKwargs` handler), `"16-true"`, `"bf16-true"`
            or `"64-true"` (the whole model in that dtype). Lightning's spellings (`"32"`,
            `"16-mixed"`, `"bf16-mixed"`, `"64"`, ...) are accepted too, in any case;
            `accelerator.mixed_precision` then reports the canonical name. None:
            `ACCEL_MIXED_PRECISION`, else (with a `deepspeed_plugin`) the precision its JSON
            enables, else `"no"`. A precision that cannot run on this device raises, saying why.
        gradient_accumulation_steps: Micro-batches per optimizer step, an int >= 1; use with
            `accumulate()`. None: `ACCEL_GRADIENT_ACCUMULATION_STEPS`, else 1. Not together with a
            `gradient_accumulation_plugin` (give the steps in one place); under DeepSpeed it must
            agree with the JSON's `gradient_accumulation_steps`.
        cpu: True trains on the CPU even where an accelerator is present (every process, as
            launched). None or False: `ACCEL_USE_CPU`, else the environment's device (False does
            not undo `accel launch --cpu`, as in Accelerate, whose examples pass `cpu=args.cpu`).
        kwarg_handlers: Handler instances that tune a feature, at most one of each type:
            `FP8RecipeKwargs`, `GradScalerKwargs`, `AutocastKwargs`, `DistributedDataParallelKwargs`,
            `InitProcessGroupKwargs`, `BitsandbytesKwargs`, `ProfileKwargs`, `ThroughputKwargs`,
            `SpikeDetectionKwargs`. A class instead of an instance, or two of one type, raise.
            None: no handlers, except those `accel launch` passes as variables: the FP8 recipe
            (`ACCEL_FP8_*`) and `BitsandbytesKwargs` (`ACCEL_BNB_*`); one given here wins, with a
            warning when it differs.
        kwargs_handlers: Accelerate's spelling of `kwarg_handlers`; giving both raises ValueError.
        device_placement: True (default): `prepare` moves models to `device`, prepared
            dataloaders move each batch there, and `init_module` builds on it. False leaves every
            object where it is; `prepare(..., device_placement=[...])` decides per object.
        step_scheduler_with_optimizer: True (default): a prepared scheduler steps only when its
            optimizer really stepped (not on accumulation micro-batches, nor on an fp16 step skipped
            for inf/NaN gradients). False: it steps on every call, for a schedule counted in
            micro-batches.
        scheduler_per_optimizer_step: accel's own. True: a prepared scheduler steps once per
            optimizer step, whatever the number of processes. False: Accelerate's count (once per
            process for each optimizer step, once under `split_batches`), so the learning rate is
            Accelerate's at every step. None: `ACCEL_SCHEDULER_PER_OPTIMIZER_STEP`, else False.
            True with `step_scheduler_with_optimizer=False` raises.
        project_dir: The project's folder (a str or Path): `save_state()` without a folder writes
            `project_dir/checkpoints/checkpoint_<n>`, and trackers log there. A shortcut for
            `ProjectConfiguration(project_dir=...)`; it fills in a `project_config` that has none,
            and a different folder there raises.
        project_config: A `ProjectConfiguration`: folders, automatic checkpoint naming (on by
            default in accel, off in Accelerate), how many checkpoints to keep, asynchronous
            saving. The Accelerator keeps this object (`accelerator.project_configuration`).
        log_with: The experiment trackers `log` writes to: a name (`"tensorboard"`, `"wandb"`,
            `"mlflow"`, `"aim"`, `"jsonl"`), a `LoggerType`, a `GeneralTracker` instance, a list of
            them, or `"all"` (every built-in tracker whose library is installed). Unlike
            Accelerate, which skips a tracker whose library is missing, a missing library raises
            ImportError naming the install. Start them with `init_trackers()`.
        dataloader_config: A `DataLoaderConfiguration`: how prepared dataloaders split and even
            out batches over the processes, the seedable sampler, non-blocking copies, stateful
            resumption. None: built from `split_batches`/`even_batches`, else the defaults.
        gradient_accumulation_plugin: A `GradientAccumulationPlugin`: the steps (`num_steps`) and
            how accumulation meets the dataloader's end (`sync_with_dataloader`) and DDP
            (`sync_each_batch`). Its `adjust_scheduler` changes no learning rate, as in Accelerate.
            None: one built from `gradient_accumulation_steps`.
        rng_types: Accelerate's names of the random generators to synchronise at each epoch
            (`"torch"`, `"cuda"`, `"xla"`, `"generator"`, ...): checked, and otherwise unused,
            because accel draws each epoch's shuffling on process 0 and shares it, which is what
            that synchronisation is for. None: none.
        split_batches: The older keyword for `DataLoaderConfiguration(split_batches=...)`: True
            splits each batch a prepared dataloader yields over the processes (the batch size is
            the global one). Not together with `dataloader_config`.
        even_batches: The older keyword for `DataLoaderConfiguration(even_batches=...)`: True
            (default) repeats samples so that every process gets the same number of batches. Not
            together with `dataloader_config`.
        dynamo_backend: A torch.compile backend (`"inductor"`, `"aot_eager"`, ..., or `"no"`):
            `prepare` compiles each model, last, over DDP (docs/compile.md). None:
            `ACCEL_DYNAMO_BACKEND`, else `"no"`. A backend this torch or device cannot run raises
            here. Not together with `dynamo_plugin`.
        dynamo_plugin: A `TorchDynamoPlugin` (backend, mode, fullgraph, dynamic, regional
            compilation); each field left None is read from its `ACCEL_DYNAMO_*` variable.
        fsdp_plugin: A `FullyShardedDataParallelPlugin`: prepared models are sharded with FSDP2
            instead of DDP (docs/fsdp.md). None: the plugin `accel launch --use_fsdp` describes
            (`ACCEL_USE_FSDP` and the `ACCEL_FSDP_*` variables), else no sharding. Checked against
            the precision and quantization here; not together with `deepspeed_plugin`.
        deepspeed_plugin: A `DeepSpeedPlugin`: models train inside DeepSpeed's ZeRO engine
            (docs/deepspeed.md; DeepSpeed must be installed). None: the plugin
            `accel launch --use_deepspeed` describes (`ACCEL_USE_DEEPSPEED`, `ACCEL_DEEPSPEED_*`),
            else none. One plugin: Accelerate's dict of several named plugins is refused.
        parallelism_config: A `ParallelismConfig`: the processes as a device mesh (HSDP, tensor
            parallelism, both; docs/distributed.md), its sizes checked against the number of
            processes. None: the one `accel launch` or `accelerate launch` describes
            (`ACCEL_PARALLELISM_CONFIG_*`, `PARALLELISM_CONFIG_*`), else none (HSDP when the FSDP
            plugin asks for HYBRID_SHARD). Not together with `deepspeed_plugin`.
        torch_tp_plugin: Accelerate's older spelling of tensor parallelism:
            `TorchTensorParallelPlugin(tp_size=N)` means `ParallelismConfig(tp_size=N)`. With a
            `parallelism_config` too, the tp sizes must agree; its `torch_device_mesh` is refused
            (accel builds the mesh from the sizes).
        activation_checkpointing: accel's own: `prepare` makes blocks recompute their activations
            in backward instead of keeping them, with or without FSDP. True: the model's repeated
            blocks (its `_no_split_modules`, else its `nn.ModuleList` of identical blocks); a list
            of class names, or one comma-separated str: those blocks. None:
            `ACCEL_ACTIVATION_CHECKPOINTING`, else False.
        activation_checkpointing_policy: accel's own: how the checkpointed blocks recompute. "full"
            (the default): every activation of a block; "selective": the outputs of matrix products
            (but every second one), attention and collectives are kept, the rest recomputed
            (torchtitan's policy); a number from 0 to 1: a memory budget, the fraction of the blocks
            left unchecked (evenly spread). Needs `activation_checkpointing`. None:
            `ACCEL_ACTIVATION_CHECKPOINTING_POLICY`, else "full" (docs/long-context.md).

    Example:
        ```python
        from accel import Accelerator, GradScalerKwargs

        accelerator = Accelerator(mixed_precision="fp16", gradient_accumulation_steps=4,
                                  kwarg_handlers=[GradScalerKwargs(init_scale=1024.0)])
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        ```
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Accelerator:
        """Refuses positional arguments with what to write instead (Python's own message says only
        "takes 1 positional argument"); the constructor's signature stays `__init__`'s."""
        if args:
            example = f"mixed_precision={args[0]!r}" if isinstance(args[0], str) else "mixed_precision='bf16'"
            raise TypeError(
                f"Accelerator() takes keyword arguments only, got {len(args)} positional: {', '.join(map(repr, args))}. "
                f"Name each one, e.g. Accelerator({example})."
            )
        return super().__new__(cls)

    def __init__(
        self,
        *,
        mixed_precision: str | None = None,
        gradient_accumulation_steps: int | None = None,
        cpu: bool | None = None,
        kwarg_handlers: Sequence[KwargsHandler] | None = None,
        kwargs_handlers: Sequence[KwargsHandler] | None = None,
        device_placement: bool = True,
        step_scheduler_with_optimizer: bool = True,
        scheduler_per_optimizer_step: bool | None = None,
        project_dir: str | Path | None = None,
        project_config: checkpointing.ProjectConfiguration | None = None,
        log_with: LogWith | Sequence[LogWith] | None = None,
        dataloader_config: DataLoaderConfiguration | None = None,
        gradient_accumulation_plugin: GradientAccumulationPlugin | None = None,
        rng_types: Sequence[str] | None = None,
        split_batches: bool | None = None,
        even_batches: bool | None = None,
        dynamo_backend: str | None = None,
        dynamo_plugin: TorchDynamoPlugin | None = None,
        fsdp_plugin: FullyShardedDataParallelPlugin | None = None,
        deepspeed_plugin: DeepSpeedPlugin | None = None,
        parallelism_config: ParallelismConfig | None = None,
        torch_tp_plugin: TorchTensorParallelPlugin | None = None,
        activation_checkpointing: bool | str | Sequence[str] | None = None,
        activation_checkpointing_policy: str | float | None = None,
    ) -> None:
        """Build the Accelerator: each keyword is described under Args in the class docstring, and checked here."""
        check_environment()
        self.rng_types = options.rng_types(rng_types)
        """The `rng_types` given, checked (accel synchronises no generator: the shuffling is shared)."""
        self.dataloader_config = options.dataloader_config(dataloader_config, split_batches, even_batches)
        """How prepared dataloaders split and even out batches (a DataLoaderConfiguration)."""
        check_dataloader_config(self.dataloader_config)
        plugin = options.accumulation_plugin(gradient_accumulation_plugin, gradient_accumulation_steps)
        self.handlers = options.with_environment_recipe(collect_handlers(kwarg_handlers, kwargs_handlers))
        """The kwargs handlers in effect, by type (given, or supplied by `accel launch`); `.get(kind)` gives defaults."""
        self.deepspeed_plugin = ds_options.resolve_plugin(deepspeed_plugin, fsdp_plugin)
        """With DeepSpeedPlugin: models train inside DeepSpeed's ZeRO engine (docs/deepspeed.md)."""
        mixed_precision = ds_options.precision_keyword(self.deepspeed_plugin, mixed_precision)
        precision = options.setting(MIXED_PRECISION, mixed_precision, lambda arg, v: resolve_precision(v, arg))
        steps_given = ds_options.steps_keyword(self.deepspeed_plugin, options.steps_from(plugin) or gradient_accumulation_steps)
        steps = options.setting(GRADIENT_ACCUMULATION_STEPS, steps_given, options.positive_int)
        self.gradient_accumulation_plugin = plugin or GradientAccumulationPlugin(num_steps=steps)
        """The accumulation options in force (the one given, or one built from the steps)."""
        use_cpu = options.setting(USE_CPU, options.forced_cpu(cpu), check_bool)
        self.process_state = ProcessState.from_environment(cpu=use_cpu, group=self.handlers.get(InitProcessGroupKwargs))
        """accel's record of this process: its index, the number of processes, its device, the group's backend."""
        self.precision: PrecisionBackend = options.precision_backend(
            precision, self.process_state.device, self.handlers, self.deepspeed_plugin, parallelism_config, dynamo_backend
        )
        """The precision backend that runs (accel.backends): its `name`, `compute_dtype`, `param_dtype`."""
        self.quantizer: Quantizer | None = create_quantizer(
            self.handlers,
            self.precision,  # type: ignore[arg-type]  # _Precision wants instance attributes; a backend's are class-level
            self.process_state.device,
        )
        """With BitsandbytesKwargs: what quantizes prepared models' Linear layers (docs/quantization.md)."""
        self.fsdp_plugin = options.fsdp_plugin(fsdp_plugin, self.precision, self.quantizer)
        """With FullyShardedDataParallelPlugin: models are sharded with FSDP2 instead of DDP (docs/fsdp.md)."""
        parallelism_config = layout.from_tp_plugin(parallelism_config, torch_tp_plugin)
        self.parallelism_config = layout.resolve(parallelism_config, self.process_state, self.fsdp_plugin,
                                                 self.deepspeed_plugin)
        """The layout of the processes as a device mesh (None without one, as in Accelerate; docs/distributed.md)."""
        self.torch_device_mesh, self.process_state = layout.mesh_and_place(self.parallelism_config, self.process_state)
        """The DeviceMesh with Accelerate's dimension names (dp_replicate, dp_shard, tp; dp, dp_shard_cp, dp_cp)."""
        self.sequence_parallel = layout.sequence_parallel(self.parallelism_config, self.torch_device_mesh)
        """With sp_size > 1: what splits each prepared model's sequences over the "sp" ranks (accel.parallel.sequence)."""
        self.context_parallel = layout.context_parallel(self.parallelism_config, self.torch_device_mesh)
        """With cp_size > 1 (CUDA): torch's context parallelism over the "cp" ranks (accel.parallel.context)."""
        self.strategy: ParallelStrategy = create_strategy(
            self.fsdp_plugin, self.process_state, self.precision, self.handlers, self.parallelism_config,
            self.torch_device_mesh, self.deepspeed_plugin,
        )
        """How prepared models are spread over the processes (DDP, FSDP2, HSDP, TP), chosen here once."""
        self.activation_checkpointing: bool | tuple[str, ...] = options.setting(
            ACTIVATION_CHECKPOINTING, activation_checkpointing, lambda arg, v: ACTIVATION_CHECKPOINTING.check(v, arg)
        )
        """Blocks whose activations prepare() has recomputed in backward: False, True (found) or class names."""
        self.activation_checkpointing_policy: str | float = options.checkpoint_policy(
            activation_checkpointing_policy, self.activation_checkpointing,
            fsdp_checkpoints=bool(getattr(self.fsdp_plugin, "activation_checkpointing", False)),
        )
        """How those blocks recompute: "full", "selective" or a memory budget (accel.training.selective)."""
        self.dynamo_plugin = compiling.resolve(dynamo_backend, dynamo_plugin, self.process_state.device)
        """torch.compile's options in force (backend 'no': prepare compiles nothing; docs/compile.md)."""
        self.state = AcceleratorState.of(
            self.process_state, self.precision.name, fsdp_plugin=self.fsdp_plugin, dynamo_plugin=self.dynamo_plugin,
            deepspeed_plugin=self.deepspeed_plugin,
            parallelism_config=self.parallelism_config, device_mesh=self.torch_device_mesh,
        )
        """Accelerate's AcceleratorState: this process's place, device and precision."""
        self.gradient_state = GradientState(steps, self.gradient_accumulation_plugin.sync_with_dataloader)
        """Accelerate's GradientState: the accumulation step, `sync_gradients`, the active dataloader's end."""
        self.gradient_state.adjust_scheduler = self.gradient_accumulation_plugin.adjust_scheduler
        self.device_placement = check_bool("device_placement", device_placement)
        """Whether prepare moves objects to `device` (the constructor's keyword)."""
        self.step_scheduler_with_optimizer = check_bool("step_scheduler_with_optimizer", step_scheduler_with_optimizer)
        """Whether a prepared scheduler steps only when its optimizer stepped (the constructor's keyword)."""
        self.scheduler_per_optimizer_step = options.scheduler_per_optimizer_step(
            options.setting(SCHEDULER_PER_OPTIMIZER_STEP, scheduler_per_optimizer_step, check_bool),
            self.step_scheduler_with_optimizer,
        )
        """True: a prepared scheduler steps once per optimizer step; False (default): Accelerate's count."""
        self.project_configuration = checkpointing.resolve_project_configuration(project_config, project_dir)
        """The ProjectConfiguration in force (the one given, kept as the same object): folders, checkpoint naming."""
        self.project_dir = self.project_configuration.project_dir
        """The project's folder (a str), or None."""
        self._setup_tracking(log_with)
        self._setup_monitoring()
        self._start_registries()
        options.check_same_setup(self)

    def _start_registries(self) -> None:
        """The empty registry of what gets prepared and registered."""
        self.prepared = PreparedObjects()
        """What prepare() and register_for_checkpointing() were given, by kind, in order (what checkpoints store)."""
        self._orphan_optimizers_warned: set[int] = set()
        self._trigger: torch.Tensor | None = None

    # ----------------------------------------------------------------- processes
    def end_training(self) -> None:
        """Close the trackers and release what the precision set up and the process group: collectives
        still run afterwards (saving the model after end_training, as transformers' examples do), and a
        later Accelerator in this process makes a new group. No process waits for the others here, but for
        an asynchronous save_state under way: it is finished first, and its error raised once the rest is done."""
        try:
            checkpointing.finish_pending("end_training")
        finally:
            self._finish_trackers()
            self.precision.teardown()
            if self.process_state.distributed:
                distributed.release_process_group()

    def __repr__(self) -> str:
        return (
            f"Accelerator(mixed_precision={self.mixed_precision!r}, device={self.device}, "
            f"gradient_accumulation_steps={self.gradient_accumulation_steps}, "
            f"process {self.process_index} of {self.num_processes})"
        )


# What tools that read the constructor see (transformers inspects it): `__init__`'s keywords, not `__new__`'s *args.
_init = inspect.signature(Accelerator.__init__)
Accelerator.__signature__ = _init.replace(parameters=list(_init.parameters.values())[1:])  # type: ignore[attr-defined]
