"""One step of an episode as the reward service sees it (`artfleet.v1.StepEvent`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from artfleet.v1 import common_pb2

from .actions import Action
from .observation import format_observation
from .traits import classify_command

# pytest and unittest exit 1 when tests ran and some failed: the tests were found and run.
_TESTS_FAILED_EXIT = 1


class ExecResultLike(Protocol):
    """What a command run gave back: `sandbox_pb2.ExecResult` and `ExecOutcome` both fit."""

    @property
    def exit_code(self) -> int: ...

    @property
    def stdout(self) -> str | bytes: ...

    @property
    def stderr(self) -> str | bytes: ...

    @property
    def timed_out(self) -> bool: ...


@dataclass(frozen=True)
class ExecOutcome:
    """A plain ExecResultLike, for tests and for sandboxes that are not the gRPC one."""

    exit_code: int
    stdout: str | bytes = ""
    stderr: str | bytes = ""
    timed_out: bool = False


def step_event(
    turn: int, action: Action, outcome: ExecResultLike | None = None
) -> common_pb2.StepEvent:
    """The step's facts for process rewards; `outcome` is None when nothing was executed.

    Only a `bash` action with an outcome counts as executed. A modification counts only
    when the command exited 0 without timing out (a failed `cp` usually wrote nothing);
    test discovery also counts on exit 1 for test runners, whose exit 1 means "tests ran,
    some failed". The command is classified by `classify_command`'s heuristics.
    """
    executed = action.kind == "bash" and outcome is not None
    event = common_pb2.StepEvent(
        turn=turn, valid_format=action.valid, is_submit=action.kind == "submit", executed=executed
    )
    if not executed or outcome is None:
        return event
    traits = classify_command(action.command)
    finished = not outcome.timed_out
    succeeded = finished and outcome.exit_code == 0
    tests_ran = finished and traits.runs_tests and outcome.exit_code == _TESTS_FAILED_EXIT
    event.exit_code = outcome.exit_code
    event.timed_out = outcome.timed_out
    event.code_modified = succeeded and traits.modifies_files
    event.tests_discovered = (succeeded or tests_ran) and traits.discovers_tests
    return event


build_step_event = step_event  # the name the design notes use


def observation_for(action: Action, outcome: ExecResultLike | None, max_chars: int) -> str:
    """The next user message: the format error, or the formatted command outcome."""
    if not action.valid:
        return action.error
    if outcome is None:
        return "The command was not run."
    return format_observation(
        outcome.exit_code, outcome.stdout, outcome.stderr, outcome.timed_out, max_chars
    )
