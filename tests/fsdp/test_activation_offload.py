"""`fsdp_activation_checkpointing_offload` (Accelerate 1.15's FSDP2 option): each checkpointed block's saved
input is kept in CPU memory until backward. Accepted where Accelerate accepts it (plugin field, config key,
flag, FSDP_/ACCEL_ variables, a wizard question on GPUs), refused without activation checkpointing, and on one
process it changes no number while each block's input goes through torch's `save_on_cpu` once per step (the
recompute in backward saves nothing there). Two processes: tests/distributed/two_processes/test_blocks.py."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tiny_transformer import make_transformer, train

from accel import Accelerator
from accel.cli.config import wizard_fsdp
from accel.fsdp import FullyShardedDataParallelPlugin
from accel.settings import FSDP_SETTINGS_BY_KEY
from accel.fsdp.environment import environment_plugin

BLOCKS = {"auto_wrap_policy": "transformer_based_wrap", "transformer_cls_names_to_wrap": ["Block"]}


def test_it_needs_activation_checkpointing_and_says_so() -> None:
    with pytest.raises(ValueError, match=r"activation_checkpointing_offload=True\) offloads .* activation_checkpointing "
                                         r"is False: set activation_checkpointing=True too"):
        FullyShardedDataParallelPlugin(**BLOCKS, activation_checkpointing_offload=True)
    with pytest.raises(TypeError, match="activation_checkpointing_offload"):
        FullyShardedDataParallelPlugin(**BLOCKS, activation_checkpointing=True, activation_checkpointing_offload="yes")
    assert FullyShardedDataParallelPlugin().activation_checkpointing_offload is False


def test_accelerates_key_flag_and_variables_set_it() -> None:
    setting = FSDP_SETTINGS_BY_KEY["fsdp_activation_checkpointing_offload"]
    assert setting.keyword == "activation_checkpointing_offload"
    assert setting.env_var == "ACCEL_FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD"
    assert setting.accelerate_env_var == "FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD"
    assert "--fsdp_activation_checkpointing_offload" in setting.flags
    config = FullyShardedDataParallelPlugin.from_config({
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "fsdp_activation_checkpointing": True,
        "fsdp_activation_checkpointing_offload": True})
    assert config.activation_checkpointing_offload is True
    launched = {"ACCELERATE_USE_FSDP": "true", "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP",  # accelerate launch
                "FSDP_ACTIVATION_CHECKPOINTING": "true", "FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD": "true"}
    plugin = environment_plugin(launched)
    assert plugin is not None and plugin.activation_checkpointing_offload is True


class _Counting(torch.autograd.graph.save_on_cpu):
    """torch's save_on_cpu, recording the shape of each tensor it packs."""

    packed: list[tuple[int, ...]] = []

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda") -> None:
        super().__init__(pin_memory, device_type)
        pack = self.pack_hook

        def counted(tensor: torch.Tensor) -> Any:
            _Counting.packed.append(tuple(tensor.shape))
            return pack(tensor)

        self.pack_hook = counted


@pytest.mark.filterwarnings("ignore:FullyShardedDataParallelPlugin.*nothing to shard")  # one process: units unsharded
def test_on_one_process_it_changes_no_number_and_each_blocks_input_goes_through_save_on_cpu(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def run(**plugin: Any) -> dict[str, Any]:
        accelerator = Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin(**BLOCKS, **plugin))
        return train(accelerator, make_transformer(dropout=0.1))  # type: ignore[return-value]

    checkpointed = run(activation_checkpointing=True)
    monkeypatch.setattr(torch.autograd.graph, "save_on_cpu", _Counting)
    _Counting.packed.clear()
    offloaded = run(activation_checkpointing=True, activation_checkpointing_offload=True)
    for key in ("losses", "gradients", "weights"):
        assert offloaded[key] == checkpointed[key], key  # exact: the same arithmetic, dropout's draws included
    blocks = len(offloaded["model"].blocks)
    assert len(_Counting.packed) == 3 * blocks  # 3 steps: each block's input once, the recompute none
    assert len(set(_Counting.packed)) == 1 and len(_Counting.packed[0]) == 3  # (batch, sequence, hidden)
    assert offloaded["saved_bytes"] < checkpointed["saved_bytes"]  # what autograd keeps outside save_on_cpu


class _Script:
    """The wizard's yes/no prompts answered by question."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers, self.asked = answers, []  # type: ignore[var-annotated]

    def yes_no(self, question: str, default: bool) -> bool:
        self.asked.append(question)
        return next(value for key, value in self.answers.items() if key in question)

    def select(self, question: str, options: list[Any], default: Any) -> Any:
        return self.yes_no(question, default)

    def text(self, setting: Any, question: str, default: Any, check: Any = None) -> Any:
        return self.yes_no(question, default)


@pytest.mark.parametrize(("on_gpus", "checkpointing", "asked"), [(True, True, True), (True, False, False),
                                                                 (False, True, False)])
def test_the_wizard_asks_it_on_gpus_after_activation_checkpointing(
        monkeypatch: pytest.MonkeyPatch, on_gpus: bool, checkpointing: bool, asked: bool) -> None:
    script = _Script({"with FSDP": True, "fsdp_auto_wrap_policy": "transformer_based_wrap", "Class names": "Block",
                      "fsdp_reshard": True, "fsdp_offload_params": False, "fsdp_activation_checkpointing_offload": True,
                      "fsdp_activation_checkpointing)": checkpointing, "fsdp_cpu_ram": False,
                      "fsdp_state_dict_type": "SHARDED_STATE_DICT"})
    for name, method in (("ask_yes_no", script.yes_no), ("ask_select", script.select), ("ask_text", script.text)):
        monkeypatch.setattr(wizard_fsdp, name, method)
    answers = wizard_fsdp.ask_fsdp({}, 2, on_gpus=on_gpus)
    assert ("fsdp_activation_checkpointing_offload" in answers) is asked
    assert any("fsdp_activation_checkpointing_offload" in question for question in script.asked) is asked
    if asked:
        assert answers["fsdp_activation_checkpointing_offload"] is True
