"""The shared wait helpers: they return as soon as the condition holds and give up at the
deadline with the last value (poll) or a failed assertion naming what (wait_for)."""

from __future__ import annotations

import pytest
from waiting import poll, wait_for


def test_poll_returns_the_first_value_that_is_done() -> None:
    values = iter([0, 1, 2, 3])
    assert poll(lambda: next(values), lambda v: v >= 2, timeout_s=60, interval_s=0) == 2


def test_poll_returns_the_last_value_at_the_deadline() -> None:
    calls = iter(range(1, 100))
    assert poll(lambda: next(calls), lambda v: False, timeout_s=0, interval_s=0) == 1


def test_wait_for_fails_naming_what_it_waited_for() -> None:
    with pytest.raises(AssertionError, match="the moon"):
        wait_for("the moon", lambda: None, timeout_s=0, interval_s=0)
    assert wait_for("a value", lambda: "yes", timeout_s=0) == "yes"
