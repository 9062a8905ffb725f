"""The sampling seeds' derivation (artfleet.contracts.seeds): pinned, distinct, in range."""

from __future__ import annotations

from artfleet.contracts import seeds


def test_the_derivation_is_pinned() -> None:
    # A change here changes every job's samples: bump seeds._VERSION and say so in the docs.
    group = seeds.group_seed(7, 1, 0)
    assert group == seeds.group_seed(7, 1, 0)
    assert (group, seeds.rollout_seed(group, 0), seeds.call_seed(12345, 0)) == PINNED


PINNED = (8594644758326148, 6101858383146974, 2236109505296996)


def test_neighbouring_inputs_give_distinct_seeds_in_range() -> None:
    groups = {seeds.group_seed(s, step, g) for s in range(3) for step in range(4) for g in range(8)}
    assert len(groups) == 3 * 4 * 8
    rollouts = {seeds.rollout_seed(g, r) for g in groups for r in range(8)}
    assert len(rollouts) == len(groups) * 8
    calls = {seeds.call_seed(r, c) for r in list(rollouts)[:50] for c in range(10)}
    assert len(calls) == 500
    assert all(0 <= s < 2**seeds.BITS for s in groups | rollouts | calls)
    # A rollout's seed and a call's seed of the same numbers are not the same stream.
    assert seeds.rollout_seed(5, 1) != seeds.call_seed(5, 1)
