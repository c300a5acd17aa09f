"""FullyShardedDataParallelPlugin: the options of fully sharded training, in Accelerate's names.

accel shards with PyTorch's FSDP2 (`torch.distributed.fsdp.fully_shard`, DTensor parameters)
only, so `fsdp_version` must be 2; FSDP1's wrapper class and its own options are refused with
the option to use instead. Every value is checked here, at construction; a handler reads
nothing from the environment: the command line turns `fsdp_config:` into arguments
(`CONFIG_KEYS` maps Accelerate's config keys to the fields, `from_config` builds a plugin).

    plugin = FullyShardedDataParallelPlugin(
        auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap=["Block"],
        activation_checkpointing=True,
    )
    accelerator = Accelerator(mixed_precision="bf16", fsdp_plugin=plugin)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from accel._validation import check_bool, check_choice, check_int, closest
from accel.kwargs_handlers.base import KwargsHandler, kwargs_handler
from accel.kwargs_handlers.fsdp_names import (  # torch-free: the settings schema shares them
    CONFIG_KEYS,
    FSDP_VERSION_1_REASON,
    STATE_DICT_TYPES,
    WRAP_POLICIES,
)

if TYPE_CHECKING:  # torch.distributed.fsdp loads DTensor and more: only when a plugin is built (_policies)
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy

DEFAULT_MIN_NUM_PARAMS = 100_000_000
"""Accelerate's default threshold of `size_based_wrap` (FSDP_MIN_NUM_PARAMS)."""

ModulePolicy = Callable[[nn.Module], bool]
"""A callable auto_wrap_policy: True for each submodule to shard as its own unit."""

_FSDP1_ONLY: Mapping[str, str] = MappingProxyType(
    {
        "sharding_strategy": "FSDP2 says it with reshard_after_forward: FULL_SHARD -> True, SHARD_GRAD_OP -> "
        "False; NO_SHARD is DDP (leave out the fsdp_plugin); HYBRID_SHARD (HSDP) is accepted, or say it with "
        "ParallelismConfig(dp_replicate_size=..., dp_shard_size=...)",
        "backward_prefetch": "FSDP2 prefetches the next unit's all-gather itself; leave it out",
        "forward_prefetch": "FSDP2 prefetches the next unit's all-gather itself; leave it out",
        "limit_all_gathers": "FSDP2 limits its all-gathers itself; leave it out",
        "use_orig_params": "FSDP2 always trains the original parameters (as DTensors); leave it out",
        "sync_module_states": "accel always sends process 0's weights to every process before sharding; "
        "leave it out",
    }
)
"""Accelerate's FSDP1-only options -> why FSDP2 has no such option and what to do instead."""


@kwargs_handler()
class FullyShardedDataParallelPlugin(KwargsHandler):
    """How `prepare` shards a model with torch's fully_shard (FSDP2), in Accelerate's names."""

    fsdp_version: int = 2
    """2: torch.distributed.fsdp.fully_shard. 1 (torch's deprecated FullyShardedDataParallel) is refused."""
    auto_wrap_policy: str | ModulePolicy | None = None
    """Which submodules become their own sharded unit before the root: 'transformer_based_wrap'
    (the classes in transformer_cls_names_to_wrap), 'size_based_wrap' (min_num_params), a callable
    `policy(module) -> bool`, or None / 'no_wrap' (the root only: the whole model is gathered at once)."""
    transformer_cls_names_to_wrap: tuple[str, ...] | None = None
    """Class names of the transformer blocks (a list or a comma-separated string); None uses the
    model's `_no_split_modules` (Hugging Face models). Only with 'transformer_based_wrap'."""
    min_num_params: int | None = None
    """'size_based_wrap': a submodule holding at least this many parameters (not already in a
    smaller unit) becomes a unit; None: 100,000,000 (Accelerate's default)."""
    reshard_after_forward: bool = True
    """Free the gathered parameters after each unit's forward (gather them again for backward):
    less memory, one more all-gather. False keeps them until backward (FSDP1's SHARD_GRAD_OP)."""
    cpu_offload: bool | CPUOffloadPolicy = False
    """Keep the sharded parameters, gradients and optimizer state in CPU memory (CPUOffloadPolicy)."""
    state_dict_type: str = "SHARDED_STATE_DICT"
    """How save_state writes the model and optimizer: 'SHARDED_STATE_DICT' (each process its shards,
    torch.distributed.checkpoint; loads onto any number of processes) or 'FULL_STATE_DICT'
    (gathered on the main process)."""
    activation_checkpointing: bool = False
    """Recompute each wrapped unit's activations in backward instead of keeping them."""
    activation_checkpointing_offload: bool = False
    """With activation_checkpointing: keep the input each checkpointed unit saves for its recompute in CPU
    memory (pinned on a GPU) between forward and backward: one `sequence x hidden` tensor per block, the
    activations that remain at long sequence lengths (Accelerate 1.15's option). On a CPU run they are in
    host memory already: nothing moves."""
    cpu_ram_efficient_loading: bool = False
    """Only process 0 needs the real weights: prepare shards the model on the meta device and sends
    process 0's weights into every process's shards, and `accelerator.init_module()` builds the model
    on the meta device on the other processes (no memory). Peak CPU memory: one full model on process 0,
    shards elsewhere (docs/fsdp.md)."""
    mixed_precision_policy: MixedPrecisionPolicy | Mapping[str, Any] | None = None
    """None: derived from the Accelerator's mixed_precision (bf16 -> bf16 parameters, fp32 gradient
    reduction). A MixedPrecisionPolicy, or a dict of its fields (dtypes as torch.dtype or names)."""
    # FSDP1-only options of Accelerate's plugin: accepted as names so that giving one says what to do instead.
    sharding_strategy: Any = dataclasses.field(default=None, repr=False)
    """FSDP1's strategy: only 'HYBRID_SHARD' is accepted (HSDP over machines x processes per machine)."""
    backward_prefetch: Any = dataclasses.field(default=None, repr=False)
    """FSDP1 only, refused when given: FSDP2 prefetches the next unit's all-gather itself."""
    forward_prefetch: Any = dataclasses.field(default=None, repr=False)
    """FSDP1 only, refused when given: FSDP2 prefetches the next unit's all-gather itself."""
    limit_all_gathers: Any = dataclasses.field(default=None, repr=False)
    """FSDP1 only, refused when given: FSDP2 limits its all-gathers itself."""
    use_orig_params: Any = dataclasses.field(default=None, repr=False)
    """FSDP1 only, refused when given: FSDP2 always trains the original parameters (as DTensors)."""
    sync_module_states: Any = dataclasses.field(default=None, repr=False)
    """FSDP1 only, refused when given: accel always sends process 0's weights to every process before sharding."""

    def __post_init__(self) -> None:
        _check_version(self.fsdp_version)
        self._set("sharding_strategy", _hybrid_shard(self.sharding_strategy))
        _refuse_fsdp1_options(self)
        self._set("auto_wrap_policy", _wrap_policy(self.auto_wrap_policy))
        self._set("transformer_cls_names_to_wrap", _class_names(self.transformer_cls_names_to_wrap))
        if self.min_num_params is not None:
            check_int("FullyShardedDataParallelPlugin.min_num_params", self.min_num_params, minimum=1)
        _check_policy_options(self)
        check_bool("FullyShardedDataParallelPlugin.reshard_after_forward", self.reshard_after_forward)
        if not isinstance(self.cpu_offload, _policies().CPUOffloadPolicy):
            check_bool("FullyShardedDataParallelPlugin.cpu_offload", self.cpu_offload)
        self._set("state_dict_type", _state_dict_type(self.state_dict_type))
        check_bool("FullyShardedDataParallelPlugin.activation_checkpointing", self.activation_checkpointing)
        _check_offload(self.activation_checkpointing_offload, self.activation_checkpointing)
        check_bool("FullyShardedDataParallelPlugin.cpu_ram_efficient_loading", self.cpu_ram_efficient_loading)
        self._set("mixed_precision_policy", _mixed_precision_policy(self.mixed_precision_policy))

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    @property
    def offload_policy(self) -> CPUOffloadPolicy | None:
        """The CPUOffloadPolicy to shard with, or None (parameters stay on the training device)."""
        policies = _policies()
        if isinstance(self.cpu_offload, policies.CPUOffloadPolicy):
            return self.cpu_offload
        return policies.CPUOffloadPolicy(pin_memory=torch.cuda.is_available()) if self.cpu_offload else None

    @property
    def sharded_state_dict(self) -> bool:
        """True when checkpoints hold each process's shards (state_dict_type='SHARDED_STATE_DICT')."""
        return self.state_dict_type == "SHARDED_STATE_DICT"

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> FullyShardedDataParallelPlugin:
        """A plugin from Accelerate's `fsdp_config:` keys (`fsdp_auto_wrap_policy`, ...).

        A key that is not one of CONFIG_KEYS raises, naming it and the closest key.

        Args:
            config: Accelerate's `fsdp_config:` mapping, as in its config.yaml.

        Returns:
            The plugin, every field checked.
        """
        fields = {}
        for key, value in config.items():
            if key not in CONFIG_KEYS:
                guess = closest(key, CONFIG_KEYS)
                hint = f" Did you mean {guess!r}?" if guess else ""
                raise ValueError(f"fsdp_config: unknown key {key!r}; accepted keys: {', '.join(CONFIG_KEYS)}.{hint}")
            fields[CONFIG_KEYS[key]] = value
        return cls(**fields)


def _check_version(version: Any) -> None:
    if version == 1 and not isinstance(version, bool):
        raise ValueError(
            f"FullyShardedDataParallelPlugin(fsdp_version=1): {FSDP_VERSION_1_REASON}. Set fsdp_version=2 "
            "(fsdp_config: fsdp_version: 2); the FSDP1-only options (sharding_strategy, backward_prefetch, ...) have "
            "FSDP2 equivalents listed in docs/fsdp.md."
        )
    if version != 2 or isinstance(version, bool):
        raise ValueError(f"FullyShardedDataParallelPlugin.fsdp_version={version!r} is not accepted; accepted: 2.")


HYBRID_SHARD = "HYBRID_SHARD"
"""The one FSDP1 sharding strategy accel accepts: HSDP, replicated across machines and sharded within each
(accel.parallel.layout builds that mesh unless a ParallelismConfig gives the sizes)."""


def _hybrid_shard(strategy: Any) -> Any:
    """HYBRID_SHARD in any of Accelerate's spellings (name, torch's enum, its number 4) as the string; other values as given."""
    name = getattr(strategy, "name", strategy)
    return HYBRID_SHARD if str(name).upper() in (HYBRID_SHARD, "4") else strategy


def _refuse_fsdp1_options(plugin: FullyShardedDataParallelPlugin) -> None:
    for name, why in _FSDP1_ONLY.items():
        value = getattr(plugin, name)
        if value is not None and not (name == "sharding_strategy" and value == HYBRID_SHARD):
            raise ValueError(
                f"FullyShardedDataParallelPlugin({name}={value!r}): {name} is an FSDP1 option and accel runs "
                f"FSDP2 only: {why}."
            )


def _wrap_policy(policy: Any) -> str | ModulePolicy | None:
    if policy is None or callable(policy):
        return policy
    name = check_choice("FullyShardedDataParallelPlugin.auto_wrap_policy", policy, WRAP_POLICIES)
    return None if name == "no_wrap" else name


def _class_names(names: Any) -> tuple[str, ...] | None:
    if names is None:
        return None
    if isinstance(names, str):
        names = [name.strip() for name in names.split(",")]
    if not isinstance(names, (list, tuple, set, frozenset)) or not all(isinstance(n, str) and n for n in names):
        raise TypeError(
            f"FullyShardedDataParallelPlugin.transformer_cls_names_to_wrap={names!r} must be class names: a list of "
            "strings or one comma-separated string, such as ['GPT2Block'] or 'GPT2Block,LlamaDecoderLayer'."
        )
    return tuple(dict.fromkeys(names))


def _check_policy_options(plugin: FullyShardedDataParallelPlugin) -> None:
    """An option that only one wrap policy reads, given with another, would be ignored: refuse it."""
    policy = plugin.auto_wrap_policy
    shown = policy if isinstance(policy, str) or policy is None else "a callable"
    if plugin.transformer_cls_names_to_wrap is not None and policy != "transformer_based_wrap":
        raise ValueError(
            f"FullyShardedDataParallelPlugin: transformer_cls_names_to_wrap is read only with "
            f"auto_wrap_policy='transformer_based_wrap', but auto_wrap_policy is {shown!r}. "
            "Set auto_wrap_policy='transformer_based_wrap', or leave out transformer_cls_names_to_wrap."
        )
    if plugin.min_num_params is not None and policy != "size_based_wrap":
        raise ValueError(
            f"FullyShardedDataParallelPlugin: min_num_params is read only with auto_wrap_policy='size_based_wrap', "
            f"but auto_wrap_policy is {shown!r}. Set auto_wrap_policy='size_based_wrap', or leave out min_num_params."
        )
    if plugin.activation_checkpointing is True and policy is None:
        raise ValueError(
            "FullyShardedDataParallelPlugin(activation_checkpointing=True) checkpoints each wrapped block, but "
            "auto_wrap_policy is None, so there are no blocks. Set auto_wrap_policy='transformer_based_wrap' "
            "(with transformer_cls_names_to_wrap) or 'size_based_wrap'."
        )


def _state_dict_type(value: Any) -> str:
    return check_choice("FullyShardedDataParallelPlugin.state_dict_type", value, STATE_DICT_TYPES)


def _policies() -> Any:
    """torch.distributed.fsdp, imported when a plugin is used (it loads FSDP2, DTensor and their dependencies)."""
    import torch.distributed.fsdp

    return torch.distributed.fsdp


def _mixed_precision_policy(policy: Any) -> MixedPrecisionPolicy | None:
    MixedPrecisionPolicy = _policies().MixedPrecisionPolicy  # noqa: N806  # the class, named as torch names it
    if policy is None or isinstance(policy, MixedPrecisionPolicy):
        return policy
    if not isinstance(policy, Mapping):
        raise TypeError(
            f"FullyShardedDataParallelPlugin.mixed_precision_policy={policy!r} must be None (derived from "
            "mixed_precision), a torch.distributed.fsdp.MixedPrecisionPolicy, or a dict of its fields."
        )
    known = [f.name for f in dataclasses.fields(MixedPrecisionPolicy)]
    fields: dict[str, Any] = {}
    for key, value in policy.items():
        if key not in known:
            guess = closest(key, known)
            hint = f" Did you mean {guess!r}?" if guess else ""
            raise ValueError(f"mixed_precision_policy: unknown field {key!r}; its fields are {', '.join(known)}.{hint}")
        fields[key] = _dtype(f"mixed_precision_policy[{key!r}]", value) if key.endswith("dtype") else value
    return MixedPrecisionPolicy(**fields)


_DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
           "fp16": torch.float16, "float16": torch.float16, "fp64": torch.float64, "float64": torch.float64}


def _dtype(argument: str, value: Any) -> torch.dtype | None:
    if value is None or isinstance(value, torch.dtype):
        return value
    name = check_choice(argument, value, _DTYPES)
    return _DTYPES[name]


def _check_offload(offload: bool, checkpointing: bool) -> None:
    """activation_checkpointing_offload moves what checkpointing saves: it needs activation_checkpointing."""
    check_bool("FullyShardedDataParallelPlugin.activation_checkpointing_offload", offload)
    if offload and not checkpointing:
        raise ValueError(
            "FullyShardedDataParallelPlugin(activation_checkpointing_offload=True) offloads the inputs that activation "
            "checkpointing saves, and activation_checkpointing is False: set activation_checkpointing=True too "
            "(fsdp_activation_checkpointing: true), or leave the offload off."
        )
