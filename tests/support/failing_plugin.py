"""A plugin's rollout code that fails as the user's did (a bare assert, no message), and
the failure record the rollout worker makes of it (artfleet_rollout.failures): for tests
of what the trainer and the CLI show of failed episodes. Outside the test modules, so
pytest leaves its assert as written."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from artfleet.runtime.logs import request_id
from artfleet.v1 import common_pb2 as pb
from artfleet_rollout import failures


def check_answer(answer: str) -> None:
    assert answer == "2"


def rollout(scenario: str) -> None:
    if scenario == "missing":
        raise KeyError("answer")
    check_answer("3")


def failure(scenario: str, run_id: str) -> pb.RolloutException:
    """The record of `rollout(scenario)`'s failure in the run `run_id`, its frames from the
    rollout function on (where the worker caught it, the frames are the fleet's)."""
    token = request_id.set(run_id)
    try:
        rollout(scenario)
    except Exception as exc:
        assert exc.__traceback__ is not None
        return failures.record(exc.with_traceback(exc.__traceback__.tb_next))
    finally:
        request_id.reset(token)
    raise AssertionError(f"{scenario!r} did not fail")


def _line(function: Callable[..., Any], text: str) -> int:
    lines, start = inspect.getsourcelines(function)
    return start + next(i for i, line in enumerate(lines) if text in line)


_HERE = failures.short_path(__file__)
# Where an "asked" scenario's failure was raised, as the trainer and the CLI say it.
WHERE = (
    f"at {_HERE}:{_line(check_answer, 'assert answer')} in check_answer < "
    f"{_HERE}:{_line(rollout, 'check_answer(')} in rollout"
)
