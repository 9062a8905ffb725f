"""What every scorer shares: the group it scores, its result types, its definition.

Spec errors are `artfleet.specs.reward.InvalidSpec` (re-exported here for scorers): an
`InvalidArgument`, so the shared interceptor maps it to INVALID_ARGUMENT.

A scorer scores a *group* (a subset of its trajectories, by index): RULER needs the
whole group at once, and per-trajectory scorers simply loop. Per-trajectory results may
be a value or a `ScorerError`; a scorer that fails as a whole raises `ScorerError`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from artfleet.specs.base import InvalidSpec, Params, spec_error
from artfleet.specs.scorer_params import BUILTIN_PARAMS
from artfleet.v1 import common_pb2 as pb

from ..metrics import RewardMetrics
from ..settings import RewardSettings
from .judge_context import JudgeContexts

# Failure types (the `type` label of artfleet_reward_failures_total).
ERROR, TIMEOUT, UNAVAILABLE, INVALID_OUTPUT = "error", "timeout", "unavailable", "invalid_output"


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
    # Judges' contexts (their model listings), for fitting prompts into them.
    judge_contexts: JudgeContexts = field(default_factory=JudgeContexts)


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

    def __init__(self, fn: Callable[[pb.Episode], float | Scored]) -> None:
        self.fn = fn

    async def score(self, ctx: GroupContext, indices: Sequence[int]) -> list[Result]:
        results: list[Result] = []
        for i in indices:
            try:
                value = self.fn(ctx.episodes[i])
                results.append(value if isinstance(value, Scored) else float(value))
            except Exception as exc:
                results.append(ScorerError(ERROR, f"{type(exc).__name__}: {exc}"))
        return results


# Returns the scorer for validated params: a built-in gets its params model (see
# artfleet.specs.scorer_params.BUILTIN_PARAMS), a custom scorer the mapping the spec holds.
Configure = Callable[[Any, str], Scorer]


@dataclass(frozen=True)
class ScorerDef:
    name: str
    description: str
    # Checks the params (raising InvalidSpec naming the field) and returns the scorer, so a
    # bad spec fails at submit, before any episode is scored.
    configure: Configure
    params: type[Params] | None = None  # validates params before `configure` sees them

    def build(self, params: Mapping[str, Any], field: str) -> Scorer:
        """The scorer for `params` as a spec holds them; `field` is their path."""
        if self.params is None:
            return self.configure(params, field)
        try:
            options = self.params.model_validate(params)
        except ValidationError as exc:
            raise spec_error(exc, (field,)) from None
        return self.configure(options, field)


def builtin(name: str, description: str, configure: Configure) -> ScorerDef:
    """A built-in scorer's definition: `name` is one the kernel declares
    (artfleet.specs.scorer_params), and its params model is the one declared there."""
    params = BUILTIN_PARAMS.get(name)
    if params is None:
        raise LookupError(f"{name!r} is not a built-in scorer of artfleet.specs.scorer_params")
    return ScorerDef(name, description, configure, params)


__all__ = [
    "ERROR",
    "INVALID_OUTPUT",
    "TIMEOUT",
    "UNAVAILABLE",
    "EpisodeScorer",
    "GroupContext",
    "InvalidSpec",
    "Result",
    "Runtime",
    "Scored",
    "Scorer",
    "ScorerDef",
    "ScorerError",
    "builtin",
]
