"""The FSDP and bitsandbytes question groups with scripted answers: the branches the terminal tests do not take."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from accel.cli.config import wizard, wizard_bnb, wizard_fsdp


class Script:
    """Stands in for the prompts: answers by question, and records what was asked and offered."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.asked: list[str] = []
        self.offered: dict[str, list[Any]] = {}

    def _answer(self, question: str) -> Any:
        self.asked.append(question)
        return next(value for key, value in self.answers.items() if key in question)

    def text(self, setting: Any, question: str, default: Any, check: Any = None) -> Any:
        return self._answer(question)

    def yes_no(self, question: str, default: bool) -> bool:
        return self._answer(question)

    def select(self, question: str, options: list[Any], default: Any) -> Any:
        self.offered[question] = options
        return self._answer(question)


def scripted(monkeypatch: pytest.MonkeyPatch, module: Any, answers: dict[str, Any]) -> Script:
    script = Script(answers)
    for name, method in (("ask_text", script.text), ("ask_yes_no", script.yes_no), ("ask_select", script.select)):
        if hasattr(module, name):
            monkeypatch.setattr(module, name, method)
    return script


def test_size_based_wrap_asks_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    scripted(monkeypatch, wizard_fsdp, {"with FSDP": True, "fsdp_auto_wrap_policy": "size_based_wrap",
                                        "fsdp_min_num_params": 5000, "fsdp_reshard": True, "fsdp_offload": True,
                                        "fsdp_activation": False, "fsdp_cpu_ram": False,
                                        "fsdp_state_dict_type": "SHARDED_STATE_DICT"})
    assert wizard_fsdp.ask_fsdp({}, 4) == {
        "use_fsdp": True, "fsdp_version": 2, "fsdp_auto_wrap_policy": "size_based_wrap", "fsdp_min_num_params": 5000,
        "fsdp_reshard_after_forward": True, "fsdp_offload_params": True, "fsdp_activation_checkpointing": False,
        "fsdp_cpu_ram_efficient_loading": False, "fsdp_state_dict_type": "SHARDED_STATE_DICT"}


def test_no_wrap_asks_no_activation_checkpointing(monkeypatch: pytest.MonkeyPatch) -> None:
    script = scripted(monkeypatch, wizard_fsdp, {"with FSDP": True, "fsdp_auto_wrap_policy": "no_wrap",
                                                 "fsdp_reshard": True, "fsdp_offload": False, "fsdp_cpu_ram": True,
                                                 "fsdp_state_dict_type": "FULL_STATE_DICT"})
    answers = wizard_fsdp.ask_fsdp({}, 2)
    assert "fsdp_activation_checkpointing" not in answers and answers["fsdp_auto_wrap_policy"] == "no_wrap"
    assert not any("activation" in question or "Class names" in question for question in script.asked)


def test_declining_fsdp_asks_nothing_more(monkeypatch: pytest.MonkeyPatch) -> None:
    script = scripted(monkeypatch, wizard_fsdp, {"with FSDP": False})
    assert wizard_fsdp.ask_fsdp({}, 2) == {} and len(script.asked) == 1


@pytest.mark.parametrize("answers", [{"mixed_precision": "fp8"}])
def test_quantization_is_not_asked_with_fp8(monkeypatch: pytest.MonkeyPatch, answers: dict[str, Any],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    script = scripted(monkeypatch, wizard_bnb, {})
    assert wizard_bnb.ask_quantization({}, torch.device("cpu"), answers) == {}
    assert script.asked == [] and "bitsandbytes quantization: not asked" in capsys.readouterr().out


def test_with_fsdp_the_int8_modes_are_shown_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """FSDP2 shards the 4-bit modes (QLoRA); the int8 modes keep their row scales outside the weight."""
    script = scripted(monkeypatch, wizard_bnb, {"Quantize": "no"})
    assert wizard_bnb.ask_quantization({}, torch.device("cpu"), {"use_fsdp": True}) == {}
    [options] = script.offered.values()
    refused = {o.value for o in options if o.unavailable and "FSDP shards the 4-bit modes only" in o.unavailable}
    assert refused == {"int8", "int8-training"}


def test_when_no_mode_can_run_for_one_reason_it_is_said_once_and_nothing_asked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """On the meta device no mode runs (nothing to quantize): one line with the reason, not six disabled modes."""
    script = scripted(monkeypatch, wizard_bnb, {})
    assert wizard_bnb.ask_quantization({}, torch.device("meta"), {"mixed_precision": "no"}) == {}
    out = capsys.readouterr().out
    assert script.asked == [] and out.count("the meta device holds no data to quantize") == 1
    assert "bitsandbytes quantization: not asked, no mode can run here" in out


def test_cpu_offload_is_asked_only_where_there_are_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the CPU the shards are in CPU memory already: the question would offer nothing."""
    script = scripted(monkeypatch, wizard_fsdp, {"with FSDP": True, "fsdp_auto_wrap_policy": "no_wrap",
                                                 "fsdp_reshard": True, "fsdp_cpu_ram": False,
                                                 "fsdp_state_dict_type": "SHARDED_STATE_DICT"})
    answers = wizard_fsdp.ask_fsdp({}, 2, on_gpus=False)
    assert "fsdp_offload_params" not in answers
    assert not any("fsdp_offload_params" in question for question in script.asked)


def test_with_ram_efficient_loading_the_4bit_modes_are_shown_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """accel quantizes in prepare, on every process: nothing sends process 0's packed weights into the shards."""
    script = scripted(monkeypatch, wizard_bnb, {"Quantize": "no"})
    answers = {"use_fsdp": True, "fsdp_cpu_ram_efficient_loading": True}
    assert wizard_bnb.ask_quantization({}, torch.device("cpu"), answers) == {}
    [options] = script.offered.values()
    assert {o.value for o in options if o.unavailable == wizard_bnb.RAM_LOADING_REASON} == {"nf4", "nf4-dq", "fp4", "fp4-dq"}


def test_with_tensor_parallelism_quantization_is_not_asked(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    script = scripted(monkeypatch, wizard_bnb, {})
    assert wizard_bnb.ask_quantization({}, torch.device("cpu"), {"parallelism_config_tp_size": 2}) == {}
    assert script.asked == [] and "tensor parallelism splits the Linear layers" in capsys.readouterr().out


FP8_TWO_PROCESSES = {"mixed_precision": "fp8", "num_processes": 2, "num_machines": 1, "use_cpu": True,
                     "fp8_backend": "native"}


def test_fsdp_is_not_asked_where_the_recipe_cannot_be_sharded(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Native FP8 at O2 keeps weights fully_shard cannot shard: FSDP is not offered (and why is said), instead of
    every question answered and the config refused at the end, nothing written."""
    script = scripted(monkeypatch, wizard_fsdp, {"with FSDP": True})
    answers = {**FP8_TWO_PROCESSES, "fp8_optimization_level": "O2"}
    assert wizard.ask_fsdp_where_it_runs({}, answers) == {}
    assert script.asked == []
    said = " ".join(capsys.readouterr().out.split())
    assert "FSDP: not asked, FP8RecipeKwargs(optimization_level='O2') cannot run on backend='native' under FSDP" in said


def test_fsdp_is_asked_where_the_recipe_can_be_sharded(monkeypatch: pytest.MonkeyPatch) -> None:
    script = scripted(monkeypatch, wizard_fsdp, {"with FSDP": False})
    assert wizard.ask_fsdp_where_it_runs({}, FP8_TWO_PROCESSES) == {}
    assert len(script.asked) == 1 and "with FSDP" in script.asked[0]
