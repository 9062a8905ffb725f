"""Evaluation figures: pass@k (the unbiased estimator), avg@k, success rate, and a paired
comparison of two evaluations over the same tasks. Pure python (no numpy/scipy): the CLI
and the trainer both use it.

A sample succeeds when its episode's task check passed (trajectory metric
`check_passed`, written by the rollout for every episode).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from artfleet.contracts.checkpoint_layout import ModelRefError, parse_model_name
from artfleet.v1 import common_pb2 as pb

SUCCESS_METRIC = "check_passed"
# An evaluation's groups run under the job id `<job>-eval` (the trainer's jobs/evals.py),
# so they never mix with a step's batch; a rollout reads it as ART's `is_validation`.
EVAL_JOB_SUFFIX = "-eval"


def eval_job_id(job_id: str) -> str:
    return f"{job_id}{EVAL_JOB_SUFFIX}"


def is_eval_job(job_id: str) -> bool:
    """Whether a group task's job id is an evaluation's (`eval_job_id`)."""
    return job_id.endswith(EVAL_JOB_SUFFIX)


def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k samples drawn without replacement from n, c of them correct,
    is correct) = 1 - C(n-c, k) / C(n, k) (Chen et al., 2021). With n < k, k = n."""
    if n <= 0:
        return 0.0
    k = min(k, n)
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _success(trajectory: pb.Trajectory) -> bool:
    value = trajectory.metrics.get(SUCCESS_METRIC)
    if value is None:
        return False
    kind = value.WhichOneof("value")
    return bool(getattr(value, kind)) if kind and kind != "null_value" else False


def task_result(scenario_id: str, group: pb.TrajectoryGroup) -> pb.EvalTaskResult:
    """One task's samples; failed episodes (exceptions) count as missing, not as failures."""
    rewards = [t.reward for t in group.trajectories]
    return pb.EvalTaskResult(
        scenario_id=scenario_id,
        rewards=rewards,
        successes=sum(_success(t) for t in group.trajectories),
        samples=len(rewards),
    )


def summarize(
    results: Sequence[pb.EvalTaskResult],
    *,
    k: int,
    split: str,
    step: int = 0,
    policy: str = "",
    seconds: float = 0.0,
) -> pb.EvalSummary:
    answered = [r for r in results if r.samples]
    samples = sum(r.samples for r in answered)
    summary = pb.EvalSummary(
        step=step, split=split, k=k, tasks=len(results), seconds=seconds, policy=policy
    )
    summary.results.extend(results)
    if not answered:
        return summary
    summary.reward_mean = sum(sum(r.rewards) for r in answered) / samples
    summary.success_rate = sum(r.successes for r in answered) / samples
    summary.avg_at_k = _mean([r.successes / r.samples for r in answered])
    # Tasks with no sample back count as 0 for pass@k: the policy did not solve them.
    summary.pass_at_k = _mean([pass_at_k(r.samples, r.successes, k) for r in results])
    return summary


def served_policy(served_as: str, trajectories: Iterable[pb.Trajectory]) -> str:
    """The checkpoint an evaluation's answers named (EvalSummary.served_policy): where the
    endpoint served the policy as `name@step` (so its answers name their step, the
    trajectories' policy versions), `name@<steps answered>`, steps joined by commas when
    they changed during the evaluation (a running job's `@latest` or `@best`); else the
    name it served (`served_as`), "" when unknown."""
    try:
        name, step = parse_model_name(served_as)
    except ModelRefError:
        return served_as
    if not isinstance(step, int):
        return served_as
    steps = sorted(
        {
            version
            for t in trajectories
            for field in ("initial_policy_version", "final_policy_version")
            if t.HasField(field) and (version := getattr(t, field)) >= 0
        }
    )
    return f"{name}@{','.join(map(str, steps))}" if steps else served_as


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


# ---------------------------------------------------------------- paired comparison


@dataclass(frozen=True)
class TaskDelta:
    scenario_id: str
    a: float
    b: float

    @property
    def delta(self) -> float:
        return self.b - self.a


@dataclass(frozen=True)
class Comparison:
    metric: str
    rows: list[TaskDelta]
    only_a: list[str]
    only_b: list[str]
    mean_delta: float
    ci95: tuple[float, float]  # paired bootstrap over tasks
    sign_p: float  # two-sided exact sign test (ties dropped)
    wins: int
    losses: int
    ties: int

    @property
    def mean_a(self) -> float:
        """A's mean score on the paired tasks."""
        return _mean([r.a for r in self.rows])

    @property
    def mean_b(self) -> float:
        return _mean([r.b for r in self.rows])

    @property
    def dropped(self) -> int:
        """Tasks only one side evaluated: left out of the pairing."""
        return len(self.only_a) + len(self.only_b)


def task_score(result: pb.EvalTaskResult, metric: str, k: int) -> float:
    if not result.samples:
        return 0.0
    if metric == "success":
        return result.successes / result.samples
    if metric == "pass_at_k":
        return pass_at_k(result.samples, result.successes, k)
    if metric == "reward":
        return sum(result.rewards) / result.samples
    raise ValueError(f"unknown metric {metric!r} (success, pass_at_k, reward)")


def mean_score(summary: pb.EvalSummary, metric: str) -> float:
    """The mean per-task score of one evaluation (every task it ran)."""
    return _mean([task_score(r, metric, summary.k) for r in summary.results])


def compare(
    a: pb.EvalSummary,
    b: pb.EvalSummary,
    *,
    metric: str = "success",
    resamples: int = 2000,
    seed: int = 0,
) -> Comparison:
    """B minus A per task, on the tasks both evaluated."""
    by_a = {r.scenario_id: r for r in a.results}
    by_b = {r.scenario_id: r for r in b.results}
    shared = [s for s in by_a if s in by_b]
    rows = [
        TaskDelta(s, task_score(by_a[s], metric, a.k), task_score(by_b[s], metric, b.k))
        for s in shared
    ]
    deltas = [r.delta for r in rows]
    wins = sum(d > 0 for d in deltas)
    losses = sum(d < 0 for d in deltas)
    return Comparison(
        metric=metric,
        rows=rows,
        only_a=[s for s in by_a if s not in by_b],
        only_b=[s for s in by_b if s not in by_a],
        mean_delta=_mean(deltas),
        ci95=bootstrap_ci(deltas, resamples=resamples, seed=seed),
        sign_p=sign_test(wins, losses),
        wins=wins,
        losses=losses,
        ties=len(deltas) - wins - losses,
    )


def bootstrap_ci(
    deltas: Sequence[float], *, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """95% percentile interval of the mean paired difference, resampling tasks."""
    if not deltas:
        return (0.0, 0.0)
    rng = random.Random(seed)
    n = len(deltas)
    means = sorted(_mean([deltas[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples))
    return (means[int(0.025 * (resamples - 1))], means[int(0.975 * (resamples - 1))])


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact binomial test of wins vs losses under p = 1/2."""
    n = wins + losses
    if n == 0:
        return 1.0
    low = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(low + 1)) / 2**n
    return min(1.0, 2 * tail)


def results_of(groups: Iterable[tuple[str, pb.TrajectoryGroup]]) -> list[pb.EvalTaskResult]:
    return [task_result(scenario, group) for scenario, group in groups]
