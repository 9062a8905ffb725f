"""Composite rewards: run a resolved spec's scorers over a group, in order, and combine.

reward = clip_total(Σ weight × clip(value)) (a replacing RULER: its term alone, see
_totals); a weight of 0 keeps the scorer's component but adds nothing. A gated scorer
only sees the trajectories whose earlier scorer passed the gate (the others get 0 from
it). A failure applies the failing scorer's policy: zero (score 0), drop_trajectory,
drop_group, or fail_job.
Scorers run one after another: a gate needs the values of the scorers before it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from artfleet.specs.reward import DROP_GROUP, DROP_TRAJECTORY, FAIL_JOB
from artfleet.v1 import common_pb2 as pb

from .scorers.base import (
    ERROR,
    INVALID_OUTPUT,
    GroupContext,
    Result,
    Runtime,
    Scored,
    ScorerError,
)
from .spec import Entry, ResolvedSpec

GROUP = -1  # `trajectory` of a failure that concerns the whole group


@dataclass(frozen=True)
class Failure:
    scorer: str
    type: str
    message: str
    trajectory: int
    action: str


@dataclass
class TrajectoryOutcome:
    reward: float = 0.0
    components: dict[str, float] = field(default_factory=dict)
    logs: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    # The reward without group-replacing scorers (RULER), as ART keeps it.
    independent_reward: float | None = None
    dropped: bool = False


@dataclass
class GroupOutcome:
    trajectories: list[TrajectoryOutcome]
    failures: list[Failure] = field(default_factory=list)
    group_dropped: bool = False
    fail_job: str = ""

    @property
    def stopped(self) -> bool:
        return self.group_dropped or bool(self.fail_job)


async def _run(entry: Entry, ctx: GroupContext, indices: list[int]) -> list[Result]:
    """The scorer's results, one per index; an exception becomes a group-wide error."""
    try:
        results = await entry.scorer.score(ctx, indices)
    except ScorerError as exc:
        return [exc] * len(indices)
    except Exception as exc:  # a bug in a scorer is a failure like any other
        return [ScorerError(ERROR, f"{type(exc).__name__}: {exc}")] * len(indices)
    if len(results) != len(indices):
        error = ScorerError(INVALID_OUTPUT, f"{len(results)} results for {len(indices)}")
        return [error] * len(indices)
    return results


def _fail(outcome: GroupOutcome, entry: Entry, error: ScorerError, index: int) -> None:
    action = entry.spec.on_error
    outcome.failures.append(Failure(entry.name, error.type, error.message, index, action))
    if action == DROP_TRAJECTORY:
        if index != GROUP:  # a group-wide error drops each trajectory it hit (_apply)
            outcome.trajectories[index].dropped = True
    elif action == DROP_GROUP:
        outcome.group_dropped = True
    elif action == FAIL_JOB:
        outcome.fail_job = f"reward scorer {entry.name!r} failed ({error.type}): {error.message}"


def _apply(entry: Entry, outcome: GroupOutcome, indices: list[int], results: list[Result]) -> None:
    # One failure record for a group-wide error (every result the same object).
    shared = all(r is results[0] for r in results) and isinstance(results[0], ScorerError)
    for n, (i, result) in enumerate(zip(indices, results, strict=True)):
        trajectory = outcome.trajectories[i]
        if isinstance(result, ScorerError):
            if not shared or n == 0:
                _fail(outcome, entry, result, GROUP if shared and len(indices) > 1 else i)
            if shared and entry.spec.on_error == DROP_TRAJECTORY:
                trajectory.dropped = True
            trajectory.components[entry.name] = 0.0
            if outcome.stopped:  # the group is gone: its other results no longer matter
                return
            continue
        scored = result if isinstance(result, Scored) else Scored(float(result))
        if not math.isfinite(scored.value):
            _fail(outcome, entry, ScorerError(INVALID_OUTPUT, f"returned {scored.value}"), i)
            trajectory.components[entry.name] = 0.0
            continue
        clip = entry.spec.clip
        value = clip.clamp(scored.value) if clip else scored.value
        trajectory.components[entry.name] = value
        trajectory.logs.extend(scored.logs)
        trajectory.metrics.update(scored.metrics)


async def score_group(spec: ResolvedSpec, ctx: GroupContext) -> GroupOutcome:
    outcome = GroupOutcome([TrajectoryOutcome() for _ in ctx.episodes])
    for entry in spec.entries:
        live = [i for i, t in enumerate(outcome.trajectories) if not t.dropped]
        gate = entry.spec.gate
        active = [i for i in live if gate is None or gate.passes(_components(outcome, i))]
        for i in live:
            outcome.trajectories[i].components[entry.name] = 0.0  # gated out: 0
        if active:
            _apply(entry, outcome, active, await _run(entry, ctx, active))
        if outcome.stopped:
            return outcome
    _totals(spec, outcome)
    return outcome


def _components(outcome: GroupOutcome, i: int) -> dict[str, float]:
    return outcome.trajectories[i].components


def _totals(spec: ResolvedSpec, outcome: GroupOutcome) -> None:
    """reward = Σ weight × value; with a replacing scorer (RULER, as ART uses it) the
    reward is that scorer's term alone and the rest is kept as `independent_reward`."""
    replacing = {e.name for e in spec.entries if e.scorer.replaces_reward}
    for trajectory in outcome.trajectories:
        parts = [(e, trajectory.components.get(e.name, 0.0)) for e in spec.entries]
        total = sum(e.spec.weight * v for e, v in parts if not replacing or e.name in replacing)
        clip = spec.clip
        trajectory.reward = clip.clamp(total) if clip else total
        if replacing:
            independent = sum(e.spec.weight * v for e, v in parts if e.name not in replacing)
            trajectory.independent_reward = independent


def score_episodes(
    spec: ResolvedSpec, episodes: Sequence[pb.Episode], runtime: Runtime | None = None
) -> GroupOutcome:
    """Synchronous scoring of episodes alone, for callers outside an event loop (tests
    that recompute what the service gave). Scorers that read trajectories see empty ones."""
    if runtime is None:
        from prometheus_client import CollectorRegistry

        from .metrics import RewardMetrics
        from .settings import RewardSettings

        settings = RewardSettings(api_token="unused-outside-a-fleet")  # type: ignore[arg-type]
        runtime = Runtime(settings, RewardMetrics(CollectorRegistry()))
    ctx = GroupContext([pb.Trajectory() for _ in episodes], episodes, spec.policy, runtime)
    return asyncio.run(score_group(spec, ctx))
