"""The wizard's question groups with scripted answers: the branches a CPU-only test machine cannot reach."""

from __future__ import annotations

from typing import Any

import pytest

from accel.cli.config import wizard


class Script:
    """Stands in for the prompts: answers by question, and records each question's extra check."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.checks: dict[str, Any] = {}
        self.asked: list[str] = []

    def _answer(self, question: str) -> Any:
        self.asked.append(question)
        return next(value for key, value in self.answers.items() if key in question)

    def text(self, setting: Any, question: str, default: Any, check: Any = None) -> Any:
        self.checks[question] = check
        return self._answer(question)

    def yes_no(self, question: str, default: bool) -> bool:
        return self._answer(question)


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch) -> Script:
    scripted = Script({"CPU only": False, "Which GPUs": "0,2", "How many training processes": 2,
                       "How many machines": 2, "Which machine": 1, "IP address": "10.0.0.1", "Port": 29501})
    monkeypatch.setattr(wizard, "ask_text", scripted.text)
    monkeypatch.setattr(wizard, "ask_yes_no", scripted.yes_no)
    return scripted


def test_gpu_machine_asks_for_gpus_and_checks_the_process_count(script: Script) -> None:
    answers = wizard.ask_devices(wizard.Machine(gpus=4, cores=32), {}, machines=2)
    assert answers == {"use_cpu": False, "gpu_ids": "0,2", "num_processes": 4}  # 2 per machine, 2 machines
    processes_check = next(c for q, c in script.checks.items() if "How many training processes" in q)
    assert processes_check(2) is None
    assert processes_check(3) == "at most 2: one process per GPU"
    gpu_check = next(c for q, c in script.checks.items() if "Which GPUs" in q)
    assert gpu_check("0,7") == "no GPU 7 here (ids 0 to 3)"


def test_cpu_machine_asks_no_gpu_question(script: Script) -> None:
    answers = wizard.ask_devices(wizard.Machine(gpus=0, cores=8), {}, machines=1)
    assert answers == {"use_cpu": True, "num_processes": 2}
    assert not any("GPU" in question for question in script.asked)


def test_several_machines_ask_rank_address_and_port(script: Script) -> None:
    answers = wizard.ask_machines({})
    assert answers == {"num_machines": 2, "machine_rank": 1, "main_process_ip": "10.0.0.1", "main_process_port": 29501}
    rank_check = next(c for q, c in script.checks.items() if "Which machine" in q)
    assert rank_check(1) is None and rank_check(2) == "machine_rank must be 0 to 1"


def test_more_cpu_processes_than_cores_are_accepted_with_a_note(script: Script, capsys: pytest.CaptureFixture[str]) -> None:
    script.answers["How many training processes"] = 5
    answers = wizard.ask_devices(wizard.Machine(gpus=0, cores=2), {}, machines=1)
    assert answers["num_processes"] == 5
    assert "note: 5 processes on 2 CPU cores share the cores" in capsys.readouterr().out
    script.answers["How many training processes"] = 2
    wizard.ask_devices(wizard.Machine(gpus=0, cores=2), {}, machines=1)
    assert "note" not in capsys.readouterr().out


def test_an_impossible_ipv4_address_is_refused_where_every_spelling_is_checked() -> None:
    from accel.settings import MAIN_PROCESS_IP

    assert MAIN_PROCESS_IP.check("10.0.0.1", "main_process_ip") == "10.0.0.1"
    assert MAIN_PROCESS_IP.check("node-1.cluster", "main_process_ip") == "node-1.cluster"
    with pytest.raises(ValueError, match=r"main_process_ip='10.0.0.999' is not accepted.*four numbers of 0 to 255"):
        MAIN_PROCESS_IP.check("10.0.0.999", "main_process_ip")
