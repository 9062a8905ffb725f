"""Episode scorers (pure, no I/O): the process-reward table, test results, the task check.

Process rewards follow the terminal-agent table our users know (its README):

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
- Repo tasks (`TestSummary.grouped`): "all tests pass" means resolved, every hidden
  fail-to-pass and pass-to-pass test passed; otherwise the pass rate over the hidden tests
  that ran (a missing F2P test keeps a run from counting as all-pass). The `tests` scorer
  adds the per-group counts to the trajectory's metrics.
"""

from __future__ import annotations

from collections.abc import Sequence

from artfleet.specs.scorer_params import (
    PROCESS,
    ROLLOUT_REWARD,
    TASK_CHECK,
    TESTS,
    ProcessParams,
    RolloutRewardParams,
    TaskCheckParams,
    TestsParams,
)
from artfleet.v1 import common_pb2

from .base import EpisodeScorer, GroupContext, Result, Scored, Scorer, builtin

Episode = common_pb2.Episode


# The table's values and their defaults live in the shared spec model: one place.
ProcessRewardTable = ProcessParams
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
    return pass_rate_score(tests, table.all_tests_pass, table.partial_pass)


def process_reward(episode: Episode, table: ProcessRewardTable = DEFAULT_PROCESS_TABLE) -> float:
    """Σ per-step rewards + the episode's test reward (the terminal-agent table)."""
    return sum(step_reward(s, table) for s in episode.steps) + tests_reward(episode.tests, table)


def task_check_reward(episode: Episode) -> float:
    """1.0 when the scenario's check passed after the episode, else 0.0."""
    return 1.0 if episode.check_passed else 0.0


def pass_rate_score(tests: common_pb2.TestSummary, all_pass: float, partial: float) -> float:
    """The `tests` scorer: `all_pass` when every test passed, else `partial` x pass rate."""
    # `total` should be set; if a producer only filled the counts, they still say enough.
    total = max(tests.total, tests.passed + tests.failed + tests.errored)
    if tests.grouped and tests.resolved:
        return all_pass
    if total <= 0:
        return 0.0
    if tests.passed >= total and not tests.grouped:
        return all_pass
    return partial * (min(tests.passed, total) / total)


def scored_tests(tests: common_pb2.TestSummary, all_pass: float, partial: float) -> Scored:
    """`pass_rate_score`, with a repo task's F2P/P2P counts as trajectory metrics."""
    value = pass_rate_score(tests, all_pass, partial)
    if not tests.grouped:
        return Scored(value)
    return Scored(
        value,
        metrics={
            "f2p_passed": tests.f2p_passed,
            "f2p_failed": tests.f2p_failed,
            "p2p_passed": tests.p2p_passed,
            "p2p_failed": tests.p2p_failed,
            "resolved": float(tests.resolved),
        },
    )


# ---------------------------------------------------------------- configuration


def _configure_process(table: ProcessParams, field: str) -> EpisodeScorer:
    return EpisodeScorer(lambda episode: process_reward(episode, table))


def _configure_tests(params: TestsParams, field: str) -> EpisodeScorer:
    all_pass, partial = params.all_pass, params.partial
    return EpisodeScorer(lambda episode: scored_tests(episode.tests, all_pass, partial))


def _configure_task_check(params: TaskCheckParams, field: str) -> EpisodeScorer:
    return EpisodeScorer(task_check_reward)


class RolloutRewardScorer(Scorer):
    """The reward the episode's own rollout set (an ART rollout function's
    `trajectory.reward`), as it is."""

    async def score(self, ctx: GroupContext, indices: Sequence[int]) -> list[Result]:
        return [ctx.trajectories[i].reward for i in indices]


def _configure_rollout_reward(params: RolloutRewardParams, field: str) -> RolloutRewardScorer:
    return RolloutRewardScorer()


EPISODE_SCORERS = (
    builtin(
        PROCESS,
        "per-step process rewards + test pass rate (terminal-agent table)",
        _configure_process,
    ),
    builtin(
        TESTS,
        "1.0 when all tests pass (repo tasks: resolved), else 0.5 x pass rate",
        _configure_tests,
    ),
    builtin(TASK_CHECK, "1.0 when the scenario's check passed", _configure_task_check),
    builtin(
        ROLLOUT_REWARD,
        "the reward the episode's own rollout gave (ART rollout functions' trajectory.reward)",
        _configure_rollout_reward,
    ),
)
