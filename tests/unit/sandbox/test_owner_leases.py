"""Owner leases of sandbox sessions (`artfleet_sandbox.leases`), on a clock the test moves:
an owner that stops renewing loses all of its sessions, once; renewing keeps them; closed
sessions no longer count; hostile leases and owners are refused clearly."""

from __future__ import annotations

import math

import pytest

from artfleet_sandbox.backend import InvalidArgument
from artfleet_sandbox.leases import MAX_OWNER_CHARS, OwnerLeases, check_owner


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make() -> tuple[OwnerLeases, Clock, list[str]]:
    clock = Clock()
    closed: list[str] = []

    async def close(session_id: str) -> bool:
        closed.append(session_id)
        return True

    return OwnerLeases(close, default_s=10.0, min_s=1.0, max_s=60.0, clock=clock), clock, closed


async def test_a_lapsed_owner_loses_all_its_sessions_once() -> None:
    leases, clock, closed = make()
    leases.hold("s1", "worker-a", 10.0)
    leases.hold("s2", "worker-a", 10.0)
    leases.hold("s3", "worker-b", 10.0)
    clock.now += 9.0
    assert await leases.reap() == 0
    assert leases.renew("worker-b", 10.0) == 1  # b lives; a has died
    clock.now += 1.0  # a's lease is over
    assert await leases.reap() == 2
    assert sorted(closed) == ["s1", "s2"]
    assert leases.sessions_of("worker-a") == set()
    assert await leases.reap() == 0  # counted once
    clock.now += 8.5  # b renewed at 109: its lease ends at 119
    assert await leases.reap() == 0 and leases.sessions_of("worker-b") == {"s3"}
    clock.now += 1.0
    assert await leases.reap() == 1 and closed[-1] == "s3"


async def test_closed_sessions_no_longer_count_and_unknown_owners_are_not_recorded() -> None:
    leases, clock, closed = make()
    leases.hold("s1", "worker-a", 10.0)
    leases.drop("s1")
    leases.drop("never-held")
    assert leases.renew("worker-a", 10.0) == 0  # no sessions here: nothing recorded
    assert leases.renew("x" * 200, 10.0) == 0
    clock.now += 100.0
    assert await leases.reap() == 0 and closed == []


async def test_a_new_session_renews_its_owner() -> None:
    leases, clock, closed = make()
    leases.hold("s1", "worker-a", 10.0)
    clock.now += 8.0
    leases.hold("s2", "worker-a", 10.0)
    clock.now += 8.0
    assert await leases.reap() == 0
    clock.now += 2.0
    assert await leases.reap() == 2 and sorted(closed) == ["s1", "s2"]


def test_leases_are_clamped_and_bad_ones_refused() -> None:
    leases, _, _ = make()
    assert leases.lease(0.0) == 10.0  # the default
    assert leases.lease(0.1) == 1.0
    assert leases.lease(1e9) == 60.0
    for bad in (-1.0, math.nan, math.inf, -math.inf):
        with pytest.raises(InvalidArgument, match="owner_lease_s"):
            leases.lease(bad)


def test_owner_names_are_bounded_and_printable() -> None:
    assert check_owner("host:123:abcd") == "host:123:abcd"
    for bad in ("x" * (MAX_OWNER_CHARS + 1), "a\nb", "a\x00b"):
        with pytest.raises(InvalidArgument, match="owner"):
            check_owner(bad)
