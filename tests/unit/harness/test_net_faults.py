"""The multi-host fault driver's parts: faults drawn from a seed and spread over the steps
(one left in a gathered last step would never fire), and a host's death (every process in
its namespace SIGKILLed, forked children included, nothing outside it)."""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Callable

from netns_hosts import NetnsHosts, can_make_namespaces
from partition import NET_KINDS, kill_namespace, net_schedule
from waiting import wait_for

ONE_EACH = dict.fromkeys(NET_KINDS, 1)


def test_schedule_spreads_the_faults_over_the_steps_in_a_seeded_order() -> None:
    faults = net_schedule(24, 2, ONE_EACH | {"worker_cut": 2})
    assert [f.step for f in faults] == [1, 1, 1, 2, 2]
    assert Counter(f.kind for f in faults) == Counter(ONE_EACH | {"worker_cut": 2})
    assert all(0.5 <= f.delay_s <= 4.0 for f in faults)
    again = net_schedule(24, 2, ONE_EACH | {"worker_cut": 2})
    assert [(f.kind, f.delay_s) for f in again] == [(f.kind, f.delay_s) for f in faults]
    orders = {tuple(f.kind for f in net_schedule(seed, 2, ONE_EACH)) for seed in range(20)}
    assert len(orders) > 1, "the seed chooses the order"
    assert net_schedule(1, 3, {}) == []


def test_a_host_down_kills_every_process_in_its_namespace_and_nothing_else(
    require_infra: Callable[[bool, str], None],
) -> None:
    why_not = can_make_namespaces()
    require_infra(not why_not, why_not)
    hosts = NetnsHosts(("h1",))
    outside = subprocess.Popen(["sleep", "600"])
    try:
        hosts.start()
        ns = hosts.namespace("h1")
        # A process and the child it forked, as a worker and its pool, a replica and a
        # session's command.
        inside = subprocess.Popen([*hosts.exec_prefix("h1"), "sh", "-c", "sleep 600 & wait"])
        wait_for("the shell forked its sleep", lambda: len(_pids(ns)) == 2)
        kill_namespace(ns)
        assert inside.wait(60) == -9
        assert _pids(ns) == []
        assert outside.poll() is None, "a process outside the host was killed"
    finally:
        outside.kill()
        outside.wait()
        assert hosts.stop() == []


def _pids(namespace: str) -> list[str]:
    listed = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    return listed.stdout.split()
