"""Which scenarios a step trains on: deterministic from the seed, the epoch and the step."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence

from artfleet.contracts import seeds
from artfleet.specs.job import JobSpecModel, mcp_config_json, reward_spec_proto
from artfleet.v1 import rollout_pb2


def epoch_order(scenario_ids: Sequence[str], seed: int, epoch: int) -> list[str]:
    order = sorted(scenario_ids)
    random.Random(f"{seed}:{epoch}").shuffle(order)
    return order


def dataset(scenario_ids: Sequence[str], seed: int, dataset_size: int = 0) -> list[str]:
    """The R2E-Gym training script's --dataset-size: a subset fixed by the seed (0 = every
    scenario)."""
    if dataset_size <= 0 or dataset_size >= len(scenario_ids):
        return list(scenario_ids)
    return sorted(epoch_order(scenario_ids, seed, -1)[:dataset_size])


def scenarios_for_step(
    scenario_ids: Sequence[str],
    seed: int,
    step: int,
    groups_per_step: int,
    *,
    dataset_size: int = 0,
    num_epochs: int = 0,
) -> list[str]:
    """Step s (1-based) takes the next `groups_per_step` scenarios of a stream of epochs.

    Each epoch is a fresh permutation of all scenarios, so every scenario is seen once per
    epoch and a resumed job picks exactly the scenarios it would have picked before.
    `dataset_size` first narrows the scenarios; with `num_epochs` the stream ends after
    that many epochs, so the steps past its end get fewer scenarios or none.
    """
    if not scenario_ids:
        raise ValueError("the environment split has no scenarios")
    scenario_ids = dataset(scenario_ids, seed, dataset_size)
    n = len(scenario_ids)
    end = num_epochs * n if num_epochs > 0 else None
    picked = []
    for index in range((step - 1) * groups_per_step, step * groups_per_step):
        if end is not None and index >= end:
            break
        epoch, offset = divmod(index, n)
        picked.append(epoch_order(scenario_ids, seed, epoch)[offset])
    return picked


def steps_with_scenarios(n: int, groups_per_step: int, steps: int, num_epochs: int) -> int:
    """How many of `steps` get scenarios when the stream ends after `num_epochs`."""
    if num_epochs <= 0:
        return steps
    return min(steps, math.ceil(num_epochs * n / groups_per_step))


def group_id(job_id: str, step: int, index: int) -> str:
    return f"{job_id}:{step}:{index}"


def quorum(groups: int, min_fraction: float) -> int:
    # The epsilon keeps 0.5 × 4 at 2 despite float error.
    return max(1, math.ceil(groups * min_fraction - 1e-9))


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    if not values:
        return 0.0, 0.0
    return statistics.fmean(values), statistics.pstdev(values) if len(values) > 1 else 0.0


def group_tasks(
    spec: JobSpecModel,
    *,
    owner: str,
    step: int,
    scenarios: list[str],
    rollouts: int,
    policy: str,
    base_url: str,
    policy_version: int = 0,
    temperature: float | None = None,
    seed_step: int | None = None,
) -> list[rollout_pb2.GroupTask]:
    """One task per scenario, the job's sampling settings bound (`temperature` overrides
    the spec's, as an evaluation's may) and each its sampling seed (`seeds.group_seed` of
    the job's seed, `seed_step` (default: `step`) and its place); a judge given as "policy"
    in the reward spec calls `policy` at `base_url`."""
    seed_step = step if seed_step is None else seed_step
    reward = reward_spec_proto(spec)
    reward.policy.model = policy
    reward.policy.base_url = base_url
    return [
        rollout_pb2.GroupTask(
            job_id=owner,
            step=step,
            group_id=group_id(owner, step, i),
            environment=spec.environment,
            scenario_id=scenario,
            rollouts=rollouts,
            max_turns=spec.max_turns,
            model_base_url=base_url,
            policy=policy,
            temperature=spec.temperature if temperature is None else temperature,
            max_tokens=spec.max_tokens,
            max_context_tokens=spec.max_context_tokens,
            reward=reward,
            seed=seeds.group_seed(spec.seed, seed_step, i),
            task_prompt=spec.task_prompt,
            max_concurrent=spec.max_concurrent,
            policy_version=policy_version,
            mcp_config=mcp_config_json(spec),
            enable_thinking=spec.enable_thinking,  # None leaves it unset: the template's default
        )
        for i, scenario in enumerate(scenarios)
    ]
