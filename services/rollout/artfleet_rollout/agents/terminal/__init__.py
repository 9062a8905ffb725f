"""The terminal agent (pure logic, no I/O): parse a turn, describe a command, build prompts
and the per-step facts that process rewards are computed from."""

from .actions import FORMAT_HELP, SUBMIT_COMMAND, Action, ActionKind, parse_action
from .events import (
    ExecOutcome,
    ExecResultLike,
    build_step_event,
    observation_for,
    step_event,
)
from .observation import format_observation, truncate_middle
from .terminal_prompts import TaskLike, build_initial_messages, demonstration, system_prompt
from .traits import CommandTraits, classify_command

AGENT_NAME = "terminal"

__all__ = [
    "AGENT_NAME",
    "FORMAT_HELP",
    "SUBMIT_COMMAND",
    "Action",
    "ActionKind",
    "CommandTraits",
    "ExecOutcome",
    "ExecResultLike",
    "TaskLike",
    "build_initial_messages",
    "build_step_event",
    "classify_command",
    "demonstration",
    "format_observation",
    "observation_for",
    "parse_action",
    "step_event",
    "system_prompt",
    "truncate_middle",
]
