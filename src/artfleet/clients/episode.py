"""The fleet's parts for plugin code, inside an episode: a sandbox session and the scorers.

A plugin's rollout function (an ART `rollout(model, scenario)`, docs/own-agents.md) runs in
a rollout worker, as the operator's trusted code. What it needs of the fleet it asks for
here, and only inside a fleet episode (the `art` agent kind sets one up around the call):

    from artfleet.clients.episode import sandbox, score

    async with sandbox({"calc.py": source}, image="python:3.12") as box:
        ran = await box.exec("python calc.py", timeout_s=20)      # exit_code, stdout, stderr
        report = await box.run_tests("pytest -q", timeout_s=120)  # passed, failed, total, ...
    [verdict] = await score(trajectory, "tests")                  # reward, components, logs

`sandbox()` opens a session on the fleet's sandbox replicas under the worker's owner lease
(a dead worker's sessions close within the lease) and closes it on exit, also when the
episode times out. The model's commands run there, never in the worker. `exec` runs in the
session's REPL: a shell whose working directory and variables carry from call to call.
The last `run_tests` of an episode is its test record: the `tests` scorer reads it, here
and in the job's own `reward:`.

`rollout_context()` says which episode this is: the job's step, the split, whether it is
an evaluation's (ART's `is_validation`), the rollout's index and seed; whatever shape the
rollout function has (`rollout(model, scenario)` gets no step).

A policy call past the episode's budget (the job's `max_turns` calls, or a conversation
that no longer fits `max_context_tokens`) raises `BudgetExhausted` out of
`chat.completions.create`: the episode ends there (finish `max_turns` or `context`) and
keeps its conversation as far as it went, scored as any other.

`score()` asks the reward service, with the scorers a job's `reward:` names (`tests`,
`judge`, `ruler`, `answer_check`, a package's own; `name` or `{name, weight, params, ...}`),
and scores the trajectories given as one group (RULER ranks them against each other). It
does not set `trajectory.reward`; the rollout decides what to do with the verdicts. After
the rollout returns, the job's `reward:` still scores the episode's whole group.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

from artfleet.contracts.art_types import art
from artfleet.specs.base import InvalidSpec
from artfleet.specs.reward import reward_to_proto, validate_reward
from artfleet.v1 import common_pb2 as pb


@dataclass(frozen=True)
class Ran:
    """What a command gave back (output decoded as UTF-8, bad bytes replaced)."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False


@dataclass(frozen=True)
class TestRun:
    """What a test run reported, as the sandbox counted it (JUnit cases by name)."""

    passed: int
    failed: int
    errored: int
    total: int
    exit_code: int
    timed_out: bool
    output: str = ""
    cases: Mapping[str, str] = field(default_factory=dict)  # test name -> outcome


@dataclass(frozen=True)
class Score:
    """One trajectory's verdict from the reward service."""

    reward: float  # the weighted total, after the spec's clips
    components: Mapping[str, float]  # per scorer, unweighted
    metrics: Mapping[str, float]
    logs: Sequence[str]
    dropped: bool = False  # a scorer's drop_trajectory (or drop_group) failure policy


@dataclass(frozen=True)
class RolloutContext:
    """The episode a rollout function runs in (`rollout_context()`)."""

    job_id: str
    step: int  # the job's step the group samples for (an evaluation: the policy's step)
    split: str  # the scenario's split: "train" or "test"
    is_validation: bool  # an evaluation's episode (the job's eval_every_steps), never trained
    scenario_id: str
    rollout_index: int  # the episode's place in its group
    seed: int  # the rollout's seed (artfleet.contracts.seeds): draw a task from it to repeat it


class BudgetExhausted(BaseException):
    """The episode's budget is spent: raised by the policy client's `create()` for a call
    past the job's `max_turns` or one whose conversation no longer fits its context. A
    BaseException, as asyncio's CancelledError: an `except Exception` (ART's `@art.retry`)
    does not take it for a failure to retry, and `finally` blocks still run. The `art`
    kind ends the episode with `finish` and keeps its conversation so far."""

    def __init__(self, finish: str, why: str) -> None:
        super().__init__(why)
        self.finish = finish  # "max_turns" or "context"


class ScoringFailed(RuntimeError):
    """A scorer's failure policy failed the job (`on_error: fail_job`); the reason says why."""


class Session(Protocol):
    """A sandbox session as the worker holds it (the rollout service's Workspace)."""

    async def exec(self, command: str, *, timeout_s: float) -> Any: ...

    async def write_files(self, files: Mapping[str, str | bytes]) -> None: ...

    async def read_file(self, path: str, *, max_bytes: int = 0) -> bytes: ...

    async def run_tests(self, command: str = "", *, timeout_s: float) -> TestRun: ...

    async def close(self) -> None: ...


class EpisodeServices(Protocol):
    """What the worker lends the episode a plugin runs in."""

    async def open_session(
        self, files: Mapping[str, str], *, image: str, network: bool
    ) -> Session: ...

    def tests_ran(self, run: TestRun, seconds: float) -> None:
        """Records the episode's latest test run (the `tests` scorer reads it)."""
        ...

    async def score(
        self, trajectories: Sequence[art.Trajectory], spec: pb.RewardSpec
    ) -> list[Score]: ...

    @property
    def rollout(self) -> RolloutContext:
        """The episode's step, split and place (`rollout_context()`)."""
        ...


# Set by the `art` kind around the rollout function: the task (and its children) see it.
CURRENT: ContextVar[EpisodeServices | None] = ContextVar("artfleet_episode", default=None)


def _current(what: str) -> EpisodeServices:
    services = CURRENT.get()
    if services is None:
        raise RuntimeError(f"{what} works inside a fleet episode: call it in a rollout")
    return services


def rollout_context() -> RolloutContext:
    """The current episode's job step, split, validation flag, index and seed."""
    return _current("rollout_context()").rollout


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class Sandbox:
    """One sandbox session of the episode (what `sandbox()` yields)."""

    def __init__(self, session: Session, services: EpisodeServices) -> None:
        self._session = session
        self._services = services

    async def exec(self, command: str, *, timeout_s: float = 60.0) -> Ran:
        """Runs `command` in the session's shell; a non-zero exit is a result, not an error."""
        result = await self._session.exec(command, timeout_s=timeout_s)
        return Ran(
            result.exit_code,
            _text(result.stdout),
            _text(result.stderr),
            bool(getattr(result, "timed_out", False)),
        )

    async def write_files(self, files: Mapping[str, str | bytes]) -> None:
        await self._session.write_files(files)

    async def read_file(self, path: str, *, max_bytes: int = 0) -> bytes:
        return await self._session.read_file(path, max_bytes=max_bytes)

    async def run_tests(self, command: str = "", *, timeout_s: float = 300.0) -> TestRun:
        """Runs a test command (pytest: `pytest -q`; "" = the sandbox's default) and counts
        its results; the episode keeps the last run as its test record."""
        started = time.perf_counter()
        report = await self._session.run_tests(command, timeout_s=timeout_s)
        self._services.tests_ran(report, time.perf_counter() - started)
        return report


@asynccontextmanager
async def sandbox(
    files: Mapping[str, str] | None = None, *, image: str = "", network: bool = False
) -> AsyncIterator[Sandbox]:
    """A sandbox session of the current episode with `files` in its workspace, closed on
    exit. `image` "" is the sandbox's default; `network` asks for network access (the
    sandbox's policy decides)."""
    services = _current("sandbox()")
    session = await services.open_session(dict(files or {}), image=image, network=network)
    try:
        yield Sandbox(session, services)
    finally:
        await session.close()


Scorers = str | Mapping[str, Any]


def reward_spec(scorers: Sequence[Scorers]) -> pb.RewardSpec:
    """The scorers as a job's `reward:` takes them; InvalidSpec names a bad field."""
    if not scorers:
        raise InvalidSpec("scorers", "name at least one scorer, e.g. score(trajectory, 'tests')")
    listed = [{"name": s} if isinstance(s, str) else dict(s) for s in scorers]
    return reward_to_proto(validate_reward({"reward": listed}))


async def score(
    trajectories: art.Trajectory | Sequence[art.Trajectory], *scorers: Scorers
) -> list[Score]:
    """Scores the trajectories as one group with the named scorers: one Score each, in
    order. Raises ScoringFailed when a scorer's failure policy fails the job."""
    services = _current("score()")
    group = [trajectories] if isinstance(trajectories, art.Trajectory) else list(trajectories)
    if not group:
        return []
    return await services.score(group, reward_spec(scorers))
