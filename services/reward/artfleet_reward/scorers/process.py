"""Episode scorers (pure, no I/O): the process-reward table, test results, the task check.

Process rewards follow the terminal-agent table our users know (seed README):

| event              | reward           |   | event          | reward            |
| valid bash command | +0.01            |   | invalid format | -0.05             |
| command succeeds   | +0.02            |   | timeout        | -0.02             |
| code modified      | +0.03            |   | all tests pass | +1.0              |
| tests discovered   | +0.02            |   | partial pass   | +0.5 x pass_rate  |

Decisions the table leaves open, made here:
- A `submit` step has a valid format but is not a bash command: it earns nothing (and
  costs nothing). Otherwise ending the episode early would be rewarded like work.
- "Command succeeds" needs the command to have run (`executed`), exit 0 and no timeout:
  an unexecuted step's exit code is the proto default 0 and proves nothing.
- An invalid-format step earns only its penalty: nothing ran, so no other row applies.
- The test rows apply once per episode and only when tests ran (`total > 0`). All pass
  gives +1.0 (not 1.0 + 0.5); otherwise +0.5 x passed / total.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from artfleet.v1 import common_pb2

from .base import EpisodeScorer, InvalidSpec, ScorerDef, number, only_keys

Episode = common_pb2.Episode


@dataclass(frozen=True)
class ProcessRewardTable:
    """The process-reward values; a scorer's `params` may override any of them."""

    valid_command: float = 0.01
    command_succeeds: float = 0.02
    code_modified: float = 0.03
    tests_discovered: float = 0.02
    invalid_format: float = -0.05
    timeout: float = -0.02
    all_tests_pass: float = 1.0
    partial_pass: float = 0.5  # multiplied by the pass rate


DEFAULT_PROCESS_TABLE = ProcessRewardTable()


def step_reward(
    step: common_pb2.StepEvent, table: ProcessRewardTable = DEFAULT_PROCESS_TABLE
) -> float:
    if not step.valid_format:
        return table.invalid_format
    reward = 0.0
    if not step.is_submit:
        reward += table.valid_command
    if step.executed and not step.timed_out and step.exit_code == 0:
        reward += table.command_succeeds
    if step.code_modified:
        reward += table.code_modified
    if step.tests_discovered:
        reward += table.tests_discovered
    if step.timed_out:
        reward += table.timeout
    return reward


def tests_reward(
    tests: common_pb2.TestSummary, table: ProcessRewardTable = DEFAULT_PROCESS_TABLE
) -> float:
    # `total` should be set; if a producer only filled the counts, they still say enough.
    total = max(tests.total, tests.passed + tests.failed + tests.errored)
    if total <= 0:
        return 0.0
    if tests.passed >= total:
        return table.all_tests_pass
    return table.partial_pass * (tests.passed / total)


def process_reward(episode: Episode, table: ProcessRewardTable = DEFAULT_PROCESS_TABLE) -> float:
    """Σ per-step rewards + the episode's test reward (seed-004 table)."""
    return sum(step_reward(s, table) for s in episode.steps) + tests_reward(episode.tests, table)


def task_check_reward(episode: Episode) -> float:
    """1.0 when the scenario's check passed after the episode, else 0.0."""
    return 1.0 if episode.check_passed else 0.0


def pass_rate_score(tests: common_pb2.TestSummary, all_pass: float, partial: float) -> float:
    """The `tests` scorer: `all_pass` when every test passed, else `partial` x pass rate."""
    total = max(tests.total, tests.passed + tests.failed + tests.errored)
    if total <= 0:
        return 0.0
    return all_pass if tests.passed >= total else partial * (tests.passed / total)


# ---------------------------------------------------------------- configuration


def _configure_process(params: Mapping[str, Any], field: str) -> EpisodeScorer:
    only_keys(params, {f.name for f in fields(ProcessRewardTable)}, field)
    overrides = {key: number(value, f"{field}.{key}") for key, value in params.items()}
    table = replace(DEFAULT_PROCESS_TABLE, **overrides)
    return EpisodeScorer(lambda episode: process_reward(episode, table))


def _configure_tests(params: Mapping[str, Any], field: str) -> EpisodeScorer:
    only_keys(params, {"all_pass", "partial"}, field)
    all_pass = number(params.get("all_pass", 1.0), f"{field}.all_pass")
    partial = number(params.get("partial", 0.5), f"{field}.partial")
    return EpisodeScorer(lambda episode: pass_rate_score(episode.tests, all_pass, partial))


def _configure_task_check(params: Mapping[str, Any], field: str) -> EpisodeScorer:
    if params:
        raise InvalidSpec(f"{field}.{next(iter(params))}", "task_check takes no parameters")
    return EpisodeScorer(task_check_reward)


EPISODE_SCORERS = (
    ScorerDef(
        "process", "per-step process rewards + test pass rate (seed 004)", _configure_process
    ),
    ScorerDef("tests", "1.0 when all tests pass, else 0.5 x pass rate", _configure_tests),
    ScorerDef("task_check", "1.0 when the scenario's check passed", _configure_task_check),
)
