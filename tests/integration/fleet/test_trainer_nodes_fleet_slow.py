"""A GRPO job on a trainer of two nodes (network-namespace hosts, one rank each: tests/
support/nodes_fleet.py) in a local fleet with vLLM serving the policy. Rank 1 is SIGKILLed
while it trains the job's first step: the step fails (rank 0's collective raises at the
dead peer), both nodes' launchers restart the group, and the job, re-queued by its lease,
resumes from its last checkpoint and ends SUCCEEDED with both steps."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fleet_jobs import checkpoint_dir, started, submit_small, trainer_of
from job_wait import wait_ended
from netns_hosts import can_make_namespaces
from nodes_fleet import NODE1, NodesFleet
from trainer_ranks import rank_pids
from waiting import wait_for

from artfleet.contracts.checkpoint_layout import ADAPTER_CONFIG
from artfleet.v1 import common_pb2 as pb
from artfleet_cli.fleet import vllm_python

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TRAINS = "rank 1 runs train"  # a follower's log line as it starts its share of a step
BROKE = "the trainer's ranks broke"  # rank 0's, when a collective fails


@pytest.fixture
def fleet(tmp_path: Path, require_infra: Callable[[bool, str], None]) -> Iterator[NodesFleet]:
    require_infra(bool(vllm_python()), "no Python with vLLM (make install builds .venv-vllm)")
    why_not = can_make_namespaces()
    require_infra(not why_not, why_not)
    fleet = NodesFleet(
        tmp_path / "fleet",
        engine="vllm",
        api=False,
        settings={"ARTFLEET_INFERENCE_KV_CACHE_GIB": "1"},
    )
    with started(fleet, timeout_s=900):
        yield fleet
    assert fleet.net_leftovers == [], "namespaces or links left behind"


def _log(fleet: NodesFleet, name: str) -> str:
    return (fleet.workdir / "logs" / f"{name}.log").read_text(errors="replace")


def test_a_job_on_two_nodes_survives_rank_1_killed_mid_step(fleet: NodesFleet) -> None:
    with trainer_of(fleet) as trainer:
        job = submit_small(trainer, name="nodes", steps=2, seed=3)
        wait_for("rank 1 training step 1", lambda: TRAINS in _log(fleet, NODE1), timeout_s=900)
        rank1 = rank_pids(fleet.launcher(NODE1))[1]  # RANK is global: node 1's one rank
        before_kill = len(_log(fleet, NODE1))
        os.kill(rank1, signal.SIGKILL)
        killed_at = time.monotonic()
        wait_for("rank 0 seeing the group broken", lambda: BROKE in _log(fleet, "trainer"), 600)
        broke_s = time.monotonic() - killed_at
        ended = wait_ended(trainer, job.id, timeout_s=1500)

    assert ended.state == pb.JOB_STATE_SUCCEEDED, ended.error
    assert ended.completed_steps == 2
    assert [s.step for s in ended.steps] == [1, 2], ended.steps  # no step lost or doubled
    assert (checkpoint_dir(fleet, ended, 2) / ADAPTER_CONFIG).is_file()
    # Node 1 took part again: its restarted rank joined the group and trained.
    after_kill = _log(fleet, NODE1)[before_kill:]
    assert "rank 1 of 2 joined" in after_kill and TRAINS in after_kill
    assert fleet.launcher(NODE1).poll() is None, "node 1's launcher gave up the group"
    print(f"rank 0 saw the group broken {broke_s:.1f} s after the kill")
