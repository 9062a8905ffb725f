"""StepEvent building, observations for the next turn, and the initial prompt."""

from __future__ import annotations

from dataclasses import dataclass, field

from artfleet.v1 import sandbox_pb2
from artfleet_rollout.agents.terminal import (
    ExecOutcome,
    build_initial_messages,
    demonstration,
    format_observation,
    observation_for,
    parse_action,
    step_event,
    system_prompt,
)

BASH_WRITE = parse_action("THOUGHT: write\n```bash\necho hi > a.txt\n```")
BASH_PYTEST = parse_action("THOUGHT: test\n```bash\npytest -q\n```")
BASH_LS = parse_action("THOUGHT: look\n```bash\nls\n```")
SUBMIT = parse_action("THOUGHT: done\n```bash\nsubmit\n```")
INVALID = parse_action("just text")


def test_successful_modifying_command() -> None:
    event = step_event(3, BASH_WRITE, ExecOutcome(exit_code=0))
    assert event.turn == 3
    assert event.valid_format and event.executed and not event.is_submit
    assert event.exit_code == 0
    assert event.code_modified
    assert not event.tests_discovered
    assert not event.timed_out


def test_failed_write_does_not_count_as_modified() -> None:
    event = step_event(1, BASH_WRITE, ExecOutcome(exit_code=1))
    assert event.executed and event.exit_code == 1
    assert not event.code_modified


def test_timeout_is_recorded_and_cancels_traits() -> None:
    event = step_event(1, BASH_PYTEST, ExecOutcome(exit_code=124, timed_out=True))
    assert event.timed_out
    assert not event.tests_discovered


def test_failing_test_run_still_discovers_tests() -> None:
    assert step_event(1, BASH_PYTEST, ExecOutcome(exit_code=1)).tests_discovered
    # pytest exit 5 = no tests collected: nothing was discovered.
    assert not step_event(1, BASH_PYTEST, ExecOutcome(exit_code=5)).tests_discovered


def test_submit_and_invalid_are_not_executed() -> None:
    submit = step_event(2, SUBMIT, None)
    assert submit.valid_format and submit.is_submit and not submit.executed
    invalid = step_event(2, INVALID, None)
    assert not invalid.valid_format and not invalid.executed


def test_bash_without_outcome_is_not_executed() -> None:
    event = step_event(1, BASH_LS, None)
    assert event.valid_format and not event.executed


def test_sandbox_exec_result_is_accepted_directly() -> None:
    result = sandbox_pb2.ExecResult(exit_code=0, stdout=b"a.txt\n", timed_out=False)
    assert step_event(1, BASH_WRITE, result).code_modified
    assert "a.txt" in observation_for(BASH_LS, result, 100)


def test_observation_for_invalid_is_the_format_error() -> None:
    assert observation_for(INVALID, None, 100) == INVALID.error
    assert observation_for(BASH_LS, ExecOutcome(0, "x"), 100).startswith("exit_code: 0")


@dataclass
class _Task:
    instruction: str
    files: dict[str, str] = field(default_factory=dict)


def test_initial_messages() -> None:
    messages = build_initial_messages(_Task("  Create a.txt.  ", {"b.txt": "", "a.txt": ""}))
    roles = [m["role"] for m in messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert messages[0]["content"] == system_prompt()
    assert messages[-1]["content"] == "Task: Create a.txt.\nFiles: a.txt, b.txt"


def test_demonstration_shows_the_exact_format() -> None:
    turns = demonstration()
    actions = [parse_action(m["content"]) for m in turns if m["role"] == "assistant"]
    assert [a.kind for a in actions] == ["bash", "submit"]
    # The demonstrated observation is what the agent really sees after such a command.
    assert turns[2]["content"] == format_observation(0, "", "", False, 1200)


def test_initial_messages_empty_dir_and_long_listing() -> None:
    assert "directory is empty" in build_initial_messages(_Task("x"))[-1]["content"]
    many = {f"f{i:02}.txt": "" for i in range(20)}
    assert "(and 8 more)" in build_initial_messages(_Task("x", many))[-1]["content"]


def test_system_prompt_is_short_and_its_example_parses() -> None:
    prompt = system_prompt()
    assert len(prompt) < 400  # a 135M model's whole episode must fit a small context
    example = prompt[prompt.index("THOUGHT: I will") : prompt.index("```\n", 50) + 3]
    assert parse_action(example).kind == "bash"
    assert "submit" in prompt
