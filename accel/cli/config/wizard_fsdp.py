"""The wizard's FSDP questions, asked when several processes train: shard or not, and how.

Each answer is a setting of the schema (use_fsdp and the fsdp_config keys), so what is written
is what `accel launch` passes on and what the script's Accelerator builds its plugin from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accel.cli.config.prompts import Option, ask_select, ask_text, ask_yes_no
from accel.settings import FSDP_SETTINGS_BY_KEY, USE_FSDP, Setting

Answers = dict[str, Any]

_KEY = FSDP_SETTINGS_BY_KEY
WRAP_TITLES = {
    "transformer_based_wrap": "one sharded unit per transformer block (by class name)",
    "size_based_wrap": "one sharded unit per submodule holding at least N parameters",
    "no_wrap": "the whole model as one unit (gathered at once: the least saving)",
}


def _current(current: Mapping[str, Any], setting: Setting) -> Any:
    return current.get(setting.name, setting.default)


def ask_fsdp(current: Mapping[str, Any], processes: int, on_gpus: bool = True) -> Answers:
    """Whether to shard with FSDP2 instead of DDP, then its options; {} for DDP. Without GPUs (`on_gpus`
    False) CPU offload is not asked: the shards are in CPU memory already."""
    question = (f"Shard the model over the {processes} processes with FSDP (FSDP2: each keeps 1/{processes} of the "
                "weights, gradients and optimizer state) instead of DDP (each keeps a full copy)?")
    if not ask_yes_no(question, _current(current, USE_FSDP)):
        return {}
    answers: Answers = {USE_FSDP.name: True, _KEY["fsdp_version"].name: 2}
    policy = ask_select(
        "How should the model be split into sharded units (fsdp_auto_wrap_policy)?",
        [Option(name, f"{name:<23} {title}") for name, title in WRAP_TITLES.items()],
        _current(current, _KEY["fsdp_auto_wrap_policy"]) or "transformer_based_wrap",
    )
    answers[_KEY["fsdp_auto_wrap_policy"].name] = policy
    answers.update(_ask_policy_option(policy, current))
    answers.update(_ask_flags(policy, current, on_gpus))
    answers[_KEY["fsdp_state_dict_type"].name] = ask_select(
        "How should save_state write the model (fsdp_state_dict_type)?",
        [Option("SHARDED_STATE_DICT", "SHARDED_STATE_DICT  each process its shards (loads on any number of processes)"),
         Option("FULL_STATE_DICT", "FULL_STATE_DICT     gathered on the main process")],
        _current(current, _KEY["fsdp_state_dict_type"]),
    )
    return answers


def _ask_policy_option(policy: str, current: Mapping[str, Any]) -> Answers:
    """The option the chosen wrap policy reads: block class names, or the size threshold."""
    if policy == "transformer_based_wrap":
        setting = _KEY["fsdp_transformer_layer_cls_to_wrap"]
        names = ask_text(setting, "Class names of the transformer blocks, comma-separated (fsdp_transformer_layer_cls_"
                         "to_wrap; empty: the model's _no_split_modules)?", _current(current, setting))
        return {} if names is None else {setting.name: names}
    if policy == "size_based_wrap":
        setting = _KEY["fsdp_min_num_params"]
        return {setting.name: ask_text(setting, "Parameters a submodule needs to become a unit (fsdp_min_num_params)?",
                                       _current(current, setting) or 100_000_000)}
    return {}


def _ask_flags(policy: str, current: Mapping[str, Any], on_gpus: bool) -> Answers:
    """The yes/no options; activation checkpointing only where there are units to checkpoint, and its offload
    to CPU memory only on GPUs."""
    questions: list[tuple[Setting, str]] = [
        (_KEY["fsdp_reshard_after_forward"], "Free each unit's gathered weights after its forward "
         "(fsdp_reshard_after_forward: less memory, one more all-gather in backward)?"),
    ]
    if on_gpus:
        questions.append((_KEY["fsdp_offload_params"], "Keep the sharded weights, gradients and optimizer state in CPU "
                          "memory (fsdp_offload_params)?"))
    if policy != "no_wrap":
        questions.append((_KEY["fsdp_activation_checkpointing"], "Recompute each unit's activations in backward "
                          "instead of keeping them (fsdp_activation_checkpointing)?"))
    questions.append((_KEY["fsdp_cpu_ram_efficient_loading"], "Read the weights on process 0 only and send them into "
                      "the other processes' shards (fsdp_cpu_ram_efficient_loading: one full copy in CPU memory "
                      "instead of one per process)?"))
    answers: Answers = {}
    for setting, question in questions:
        answers[setting.name] = ask_yes_no(question, _current(current, setting))
        if setting is _KEY["fsdp_activation_checkpointing"] and answers[setting.name] and on_gpus:
            answers.update(_ask_offload(current))
    return answers


def _ask_offload(current: Mapping[str, Any]) -> Answers:
    """Asked on GPUs once activation checkpointing is on: on a CPU the saved inputs are in host memory already."""
    offload = _KEY["fsdp_activation_checkpointing_offload"]
    question = ("Keep the input each unit saves for its recompute in CPU memory until backward "
                "(fsdp_activation_checkpointing_offload: less GPU memory at long sequences, a copy each way)?")
    return {offload.name: ask_yes_no(question, _current(current, offload))}
