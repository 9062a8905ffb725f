"""The fleet across hosts: four network namespaces on one bridged subnet (made here,
deleted after, tests/support/netns_hosts.py) — Redis; trainer with its torch inference
server, and reward; two worker hosts, each a rollout worker and a sandbox replica — every
process bound to its own host's address, the sandbox name resolving to both replicas
(tests/support/netns_fleet.py). A real job (SmolLM2) runs across them to SUCCEEDED; the
chaos suite's checks (tests/support/chaos.py) count every step trained once and every
group once. Then a 2-step job under one of each network fault, in an order drawn from a
seed (tests/support/partition.py): a worker host cut off mid-step past the group and
sandbox leases and healed, a worker host whose every process dies at once and boots
again, the Redis host restarted (same AOF directory), the trainer host cut off during
gather and healed: the job still succeeds, the lost groups ran elsewhere, nothing trained
or counted twice, no trajectory lost, every sandbox session closed after the heals. The
CI-sized variant of bench/partition_bench.py (about 5 minutes). Needs root and iproute2:
skips without them, fails under CI=true."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from chaos import ChaosDriver, ChaosPlan, verify
from chaos_fleet import leftover_workspaces, subreaper, wait_sessions_closed
from netns_fleet import PLACEMENT, WORKER_HOSTS, NetnsFleet
from netns_hosts import can_make_namespaces
from partition import NetFaultDriver

from artfleet.v1 import common_pb2 as pb

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GROUPS = "artfleet_rollout_groups_total"
SESSIONS_CREATED = "artfleet_sandbox_sessions_created_total"
# One of each network fault, CI-sized; bench/partition_bench.py runs more of them.
CI_FAULTS = {"worker_cut": 1, "host_down": 1, "redis_restart": 1, "trainer_cut": 1}


@pytest.fixture(scope="module")
def fleet(
    module_tmp: Callable[[str], Path], require_infra: Callable[[bool, str], None]
) -> Iterator[NetnsFleet]:
    why_not = can_make_namespaces()
    require_infra(not why_not, why_not)
    # One group per worker at a time: the step's two groups go to both worker hosts.
    with subreaper():  # whatever outlives its parent is found after the stop
        fleet = NetnsFleet(module_tmp("netns"), extra_env={"ARTFLEET_GROUPS_CONCURRENCY": "1"})
        try:
            fleet.start()
            yield fleet
        finally:
            codes = fleet.stop()
            assert fleet.net_leftovers == [], "namespaces or links left behind"
            assert fleet.leftover_processes() == []
            assert leftover_workspaces(fleet) == []
            assert all(code is not None and code >= 0 for code in codes.values()), codes


def _counter(fleet: NetnsFleet, name: str, family: str) -> float:
    return sum(v for k, v in fleet.scrape(name).items() if k.split("{")[0] == family)


def test_job_runs_across_four_hosts(fleet: NetnsFleet) -> None:
    started = time.monotonic()
    # Each process listens on its own host's address only, gRPC and /metrics alike.
    for name in ("trainer", "reward", *(n for pair in WORKER_HOSTS.values() for n in pair)):
        address = fleet.address_of(name)
        listening = fleet.listening(name)
        assert f"{address}:{fleet.ports[name]}" in listening, (name, listening)
        assert f"{address}:{fleet.metrics_ports[name]}" in listening, (name, listening)
        assert all(a.startswith(f"{address}:") for a in listening), (name, listening)
    assert fleet.listening("redis") == [fleet.redis_url.rsplit("@", 1)[1].removesuffix("/0")]
    assert fleet.address_of("redis") != fleet.address_of("trainer")

    plan = ChaosPlan(seed=23, steps=1, counts={})
    driver = ChaosDriver(fleet, plan, print)
    job = driver.run(timeout_s=1500)
    report = verify(driver, job, [])
    print("\n".join(report.lines()))
    assert report.job_state == "JOB_STATE_SUCCEEDED"
    assert [s.step for s in job.steps] == [1] and job.state == pb.JOB_STATE_SUCCEEDED
    assert report.missing_steps == [] and report.duplicate_steps == 0
    assert report.duplicate_groups == 0 and report.lost_trajectories == 0
    # The inference server the workers called is the trainer host's.
    assert f"{fleet.address_of('inference')}:{fleet.inference_port}" in fleet.listening("trainer")

    # Both worker hosts ran groups, and both sandbox replicas (one name) served sessions.
    for host, (rollout, sandbox) in WORKER_HOSTS.items():
        assert _counter(fleet, rollout, GROUPS) >= 1, f"{host}'s rollout worker ran no group"
        assert _counter(fleet, sandbox, SESSIONS_CREATED) >= 1, f"{host}'s sandbox served none"
        assert PLACEMENT[rollout] == PLACEMENT[sandbox] == host
    assert wait_sessions_closed(fleet, fleet.sandbox_lease_s + 30) == 0
    print(f"multihost job: {time.monotonic() - started:.0f}s, steps {report.step_seconds}")


def test_network_faults_from_a_seed(fleet: NetnsFleet) -> None:
    started = time.monotonic()
    plan = ChaosPlan(seed=24, steps=2, counts={})
    driver = NetFaultDriver(fleet, plan, print, counts=CI_FAULTS)
    report = driver.run_and_verify(timeout_s=1500)
    print("\n".join(report.lines()))
    print(f"faults job: {time.monotonic() - started:.0f}s")
    chaos = report.chaos
    assert {k: n for k, n in chaos.injected.items() if n} == CI_FAULTS, "a fault never fired"
    assert chaos.job_state == "JOB_STATE_SUCCEEDED"
    assert chaos.checks == dict.fromkeys(chaos.checks, True), chaos.checks
    assert chaos.missing_steps == [] and chaos.duplicate_steps == 0
    assert chaos.duplicate_groups == 0 and chaos.lost_trajectories == 0
    # The cut and the dead worker host's groups ran again elsewhere (recovery_s: a
    # figure, not a timed assert), and every cut lasted its hold before it healed.
    assert chaos.recoveries and all(r.recovered_s is not None for r in chaos.recoveries)
    cut_hosts = [c.host for c in report.cuts]
    assert len(cut_hosts) == 2 and "trainer" in cut_hosts
    assert set(cut_hosts) - {"trainer"} <= set(WORKER_HOSTS)
    assert all(c.healed_at is not None and c.healed_at - c.at >= c.hold_s for c in report.cuts)
    # Late publishes of the cut worker are logged as not stored; the ledger above counted
    # each group once whatever they were. Every session closed after the heal.
    assert chaos.sessions_left == 0
