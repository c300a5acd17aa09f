"""Bad input at start-up, in this process (no launch needed): each fails fast, saying what to change."""

from __future__ import annotations

import datetime
import socket
import time
from collections.abc import Iterator

import pytest

from accel import Accelerator, InitProcessGroupKwargs

SHORT = InitProcessGroupKwargs(timeout=datetime.timedelta(seconds=3))  # type: ignore[call-arg]


@pytest.fixture
def torchrun_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """The variables torchrun sets for process RANK of 2, without its agent's store."""
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    for name, value in {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}.items():
        monkeypatch.setenv(name, value)
    yield monkeypatch


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_port_in_use_names_it_and_the_flag_to_change(torchrun_env: pytest.MonkeyPatch) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        torchrun_env.setenv("MASTER_PORT", str(port))
        torchrun_env.setenv("RANK", "0")
        torchrun_env.setenv("LOCAL_RANK", "0")
        with pytest.raises(RuntimeError, match=rf"127\.0\.0\.1:{port}: it is already in use.*--main_process_port"):
            Accelerator(cpu=True, kwarg_handlers=[SHORT])


def test_an_unreachable_main_process_times_out_within_the_timeout_with_a_clear_message(
    torchrun_env: pytest.MonkeyPatch,
) -> None:
    port = _free_port()
    torchrun_env.setenv("MASTER_PORT", str(port))
    torchrun_env.setenv("RANK", "1")
    torchrun_env.setenv("LOCAL_RANK", "1")
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=rf"process 1 of 2 could not meet the others at 127\.0\.0\.1:{port} within 3 s"):
        Accelerator(cpu=True, kwarg_handlers=[SHORT])
    assert time.monotonic() - start < 20


def test_world_size_without_rank_says_how_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(ValueError, match=r"WORLD_SIZE=2 is set but RANK is not.*accel launch --num_processes 2"):
        Accelerator()


@pytest.mark.parametrize(("name", "value"), [("RANK", "2"), ("RANK", "x"), ("LOCAL_RANK", "-1")])
def test_a_bad_torchrun_variable_is_named(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=rf"{name}='{value}' is not accepted"):
        Accelerator()


def test_one_process_has_no_process_group_and_collectives_return_their_input() -> None:
    import torch
    import torch.distributed as dist

    accelerator = Accelerator()
    data = {"x": torch.ones(2)}
    assert not dist.is_initialized() and accelerator.state.backend is None
    assert accelerator.gather(data) is data and accelerator.reduce(data) is data
    assert accelerator.gather_for_metrics(data) is data
    accelerator.wait_for_everyone()
    with accelerator.main_process_first():
        pass
    with pytest.raises(ValueError, match=r"reduce\(reduction='median'\) is not accepted"):
        accelerator.reduce(data, "median")
