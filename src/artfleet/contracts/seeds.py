"""The sampling seed of every policy request, derived from the job's seed: one place.

A job's `seed` fixes its scenario order (trainer `jobs.scheduling`) and every sample its
rollouts draw, in three steps:

- `group_seed(job seed, step, group)`: the trainer's, for each group it dispatches
  (`GroupTask.seed`); `group` is the group's place among its step's groups. Evaluations
  use step 0 (training steps count from 1), whatever step they evaluate: every evaluation
  of a job draws the same samples, so before/after differences are the policy's.
- `rollout_seed(group seed, rollout)`: the rollout worker's, for each episode of the group
  (`rollout` its 0-based index in the group).
- `call_seed(rollout seed, call)`: the episode's policy call number `call` (0-based); it
  is the request's `seed` (vLLM's OpenAI server seeds a generator per request; the
  trainer's torch server one per choice: `torch_serving.generation`).

Each is a hash, so nearby inputs give unrelated seeds (a group's rollouts sample distinct
streams, an episode's turns do not reuse one stream's draws), the same on every host and
Python (no `hash()` randomisation), and without the job's id: two jobs with one seed ask
for the same seeds. Seeds are below 2**53: exact as a JSON number in any client and within
every engine's 64-bit range. What that reproduces, and what it cannot: docs/learning.md.
"""

from __future__ import annotations

import hashlib

BITS = 53
EVAL_STEP = 0  # the step every evaluation's groups are seeded with
# Part of every hash: a change of the derivation changes this, not the meaning of old seeds.
_VERSION = "artfleet-seed-v1"


def _mix(kind: str, *parts: int) -> int:
    text = ":".join([_VERSION, kind, *(str(int(p)) for p in parts)])
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - BITS)


def group_seed(job_seed: int, step: int, group: int) -> int:
    """The seed of the group at place `group` (0-based) among `step`'s groups."""
    return _mix("group", job_seed, step, group)


def rollout_seed(group: int, rollout: int) -> int:
    """The seed of rollout `rollout` (0-based) of the group whose seed is `group`."""
    return _mix("rollout", group, rollout)


def call_seed(rollout: int, call: int) -> int:
    """The `seed` of policy call `call` (0-based) of the episode whose seed is `rollout`."""
    return _mix("call", rollout, call)
