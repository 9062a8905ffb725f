"""What every scorer shares: the group it scores, its result types, spec-checking helpers.

A scorer scores a *group* (a subset of its trajectories, by index): RULER needs the
whole group at once, and per-trajectory scorers simply loop. Per-trajectory results may
be a value or a `ScorerError`; a scorer that fails as a whole raises `ScorerError`.
"""

from __future__ import annotations

import abc
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from artfleet.errors import InvalidArgument
from artfleet.v1 import common_pb2 as pb

from ..metrics import RewardMetrics
from ..settings import RewardSettings

# Failure types (the `type` label of artfleet_reward_failures_total).
ERROR, TIMEOUT, UNAVAILABLE, INVALID_OUTPUT = "error", "timeout", "unavailable", "invalid_output"


class InvalidSpec(InvalidArgument):
    """A reward spec the service cannot use; `field` is its path, e.g. `reward[1].name`.

    It is an `InvalidArgument`, so the shared interceptor maps it to INVALID_ARGUMENT too.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message, field=field)
        self.reason = message


class ScorerError(Exception):
    """A scorer could not score (judge down, bad judge output, MCP tool error, ...)."""

    def __init__(self, type: str, message: str) -> None:
        super().__init__(message)
        self.type = type
        self.message = message


@dataclass(frozen=True)
class Scored:
    """A value with what the scorer has to say about it (kept on the trajectory)."""

    value: float
    logs: tuple[str, ...] = ()
    metrics: Mapping[str, float] = field(default_factory=dict)


Result = float | Scored | ScorerError


@dataclass
class Runtime:
    """Process-wide things scorers use; one per servicer."""

    settings: RewardSettings
    metrics: RewardMetrics
    judge_cache: Any = None  # llm.JudgeCache, made by the servicer


@dataclass
class GroupContext:
    """The group being scored: trajectories and episodes are parallel."""

    trajectories: Sequence[pb.Trajectory]
    episodes: Sequence[pb.Episode]
    policy: pb.PolicyEndpoint | None
    runtime: Runtime


class Scorer(abc.ABC):
    # Group scorers (RULER) replace rewards: the servicer keeps the rest as
    # `independent_reward`, as ART's ruler_score_group does.
    replaces_reward = False

    @abc.abstractmethod
    async def score(self, ctx: GroupContext, indices: Sequence[int]) -> list[Result]:
        """One result per index, in order."""


class EpisodeScorer(Scorer):
    """A pure function of one episode (process rewards, test results, task checks)."""

    def __init__(self, fn: Callable[[pb.Episode], float]) -> None:
        self.fn = fn

    async def score(self, ctx: GroupContext, indices: Sequence[int]) -> list[Result]:
        results: list[Result] = []
        for i in indices:
            try:
                results.append(float(self.fn(ctx.episodes[i])))
            except Exception as exc:
                results.append(ScorerError(ERROR, f"{type(exc).__name__}: {exc}"))
        return results


Configure = Callable[[Mapping[str, Any], str], Scorer]


@dataclass(frozen=True)
class ScorerDef:
    name: str
    description: str
    # Validates the spec's params (raising InvalidSpec naming the field) and returns the
    # scorer, so a bad spec fails at submit, before any episode is scored.
    configure: Configure


# ---------------------------------------------------------------- params helpers


def number(value: Any, field: str) -> float:
    # bool is an int in Python; `true` as a number is a mistake, not 1.0.
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidSpec(field, "must be a finite number")
    return float(value)


def positive(value: Any, field: str) -> float:
    result = number(value, field)
    if result <= 0:
        raise InvalidSpec(field, "must be > 0")
    return result


def integer(value: Any, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidSpec(field, f"must be an integer in [{low}, {high}]")
    return value


def string(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidSpec(field, "must be a non-empty string")
    return value


def only_keys(params: Mapping[str, Any], known: set[str], field: str) -> None:
    for key in params:
        if key not in known:
            raise InvalidSpec(
                f"{field}.{key}", f"unknown parameter; known: {', '.join(sorted(known))}"
            )


def mapping(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise InvalidSpec(field, "must be an object")
    return value


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def env_secret(name: Any, field: str) -> str:
    """The name of a variable that holds a key: keys never travel in a job spec. Its
    presence is checked now so a job does not fail on its first judge call."""
    if not isinstance(name, str) or not _ENV_NAME.match(name):
        raise InvalidSpec(field, "must name an environment variable, e.g. OPENAI_API_KEY")
    if not os.environ.get(name):
        raise InvalidSpec(field, f"{name} is not set in the reward service's environment")
    return name
