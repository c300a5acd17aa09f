"""GeneralTracker: Accelerate's base class, its required attributes and `main_process_only`."""

from __future__ import annotations

from typing import Any

import pytest

from accel.tracking import GeneralTracker, on_main_process


class Counting(GeneralTracker):
    """A custom tracker written the Accelerate way."""

    name = "counting"
    requires_logging_directory = False

    def __init__(self, main_only: bool = True) -> None:
        super().__init__()
        self.main_process_only = main_only
        self.calls: list[Any] = []

    @property
    def tracker(self) -> list[Any]:
        return self.calls

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.calls.append((values, step))


def test_a_subclass_missing_required_attributes_raises_naming_them() -> None:
    class Incomplete(GeneralTracker):
        name = "x"

    with pytest.raises(NotImplementedError, match="`requires_logging_directory`, `tracker`"):
        Incomplete()


def test_blank_tracker_does_nothing() -> None:
    blank = GeneralTracker(_blank=True)
    blank.start()
    blank.store_init_configuration({"a": 1})
    assert blank.log({"a": 1}, step=0) is None
    blank.finish()


def test_main_process_only_methods_run_on_rank_0_only(monkeypatch: pytest.MonkeyPatch) -> None:
    everywhere, main_only = Counting(main_only=False), Counting()
    monkeypatch.setenv("RANK", "1")
    everywhere.log({"a": 1}, step=0)
    main_only.log({"a": 1}, step=0)
    assert everywhere.calls == [({"a": 1}, 0)] and main_only.calls == []
    monkeypatch.setenv("RANK", "0")
    main_only.log({"a": 2})
    assert main_only.calls == [({"a": 2}, None)]
