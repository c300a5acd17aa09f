"""The collective timeout: where it comes from, and the error a stuck collective ends with.

(The real stuck collectives, with two processes, are in tests/cli/test_cli_hang.py.)
"""

from __future__ import annotations

import datetime

import pytest

from accel import InitProcessGroupKwargs
from accel.distributed.errors import CollectiveError, describe, named_collective
from accel.distributed.process_group import collective_timeout

GLOO_TIMEOUT = "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 3000ms for recv operation"
GLOO_PEER_GONE = "[../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:20099."


def test_the_timeout_comes_from_the_handler_then_the_environment_then_the_default() -> None:
    seconds = datetime.timedelta(seconds=1)
    assert collective_timeout(InitProcessGroupKwargs(), {}) == datetime.timedelta(minutes=30)
    assert collective_timeout(InitProcessGroupKwargs(), {"ACCEL_COLLECTIVE_TIMEOUT": "7"}) == 7 * seconds
    explicit = InitProcessGroupKwargs(timeout=2 * seconds)
    assert collective_timeout(explicit, {"ACCEL_COLLECTIVE_TIMEOUT": "7"}) == 2 * seconds
    # given explicitly at its default value, the handler still wins: the script said so
    default = InitProcessGroupKwargs(timeout=datetime.timedelta(minutes=30))
    assert collective_timeout(default, {"ACCEL_COLLECTIVE_TIMEOUT": "7"}) == datetime.timedelta(minutes=30)


@pytest.mark.parametrize(("text", "shown"), [("0", "0 must be an int >= 1"), ("soon", "'soon' is not an integer"),
                                             ("1.5", "'1.5' is not an integer")])
def test_a_bad_environment_value_names_the_variable(text: str, shown: str) -> None:
    with pytest.raises(ValueError, match=f"ACCEL_COLLECTIVE_TIMEOUT={shown}"):
        collective_timeout(InitProcessGroupKwargs(), {"ACCEL_COLLECTIVE_TIMEOUT": text})


def test_a_transport_timeout_becomes_an_error_naming_the_operation_and_the_remedy() -> None:
    error = describe(RuntimeError(GLOO_TIMEOUT), "reduce")
    assert isinstance(error, CollectiveError) and (error.operation, error.reason) == ("reduce", "timeout")
    assert "reduce waited 1800 s (the collective timeout)" in str(error)
    assert "--collective_timeout" in str(error) and "InitProcessGroupKwargs(timeout=" in str(error)
    gone = describe(RuntimeError(GLOO_PEER_GONE), "gather")
    assert isinstance(gone, CollectiveError) and gone.reason == "peer left"
    assert "gather failed because another process left the job" in str(gone)
    assert describe(RuntimeError("CUDA out of memory"), "gather") is None


def test_named_collective_leaves_other_errors_alone() -> None:
    @named_collective("broadcast")
    def failing(error: Exception) -> None:
        raise error

    with pytest.raises(CollectiveError, match="broadcast waited") as caught:
        failing(RuntimeError(GLOO_TIMEOUT))
    assert isinstance(caught.value.__cause__, RuntimeError)  # the transport's own message stays in the chain
    with pytest.raises(ValueError, match="^shape$"):
        failing(ValueError("shape"))
    with pytest.raises(RuntimeError, match="^other$"):
        failing(RuntimeError("other"))
    assert failing.__name__ == "failing"
