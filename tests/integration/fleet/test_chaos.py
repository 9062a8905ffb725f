"""The chaos suite, CI-sized: a real local fleet (torch backend, SmolLM2) runs a 2-step job
while the driver SIGKILLs a rollout worker twice (each holding a group), the reward service
mid-score and the trainer during gather, and restarts Redis (AOF on). Driver and checks:
tests/support/chaos.py; the full run (20 worker kills, sandbox and trainer-in-train kills,
step time against an undisturbed run) is bench/chaos_bench.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from chaos import KINDS, ChaosPlan, run_chaos

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CI_FAULTS = {"worker": 2, "reward": 1, "redis": 1, "trainer_gather": 1}


def test_job_survives_kills_without_loss_or_duplicates(tmp_path: Path) -> None:
    plan = ChaosPlan(seed=11, steps=2, counts=dict.fromkeys(KINDS, 0) | CI_FAULTS)
    report = run_chaos(tmp_path, plan, baseline=False, timeout_s=3600, log=print)
    print("\n".join(report.lines()))
    assert report.job_state == "JOB_STATE_SUCCEEDED"
    assert report.injected == dict.fromkeys(KINDS, 0) | CI_FAULTS, "a planned fault never fired"
    assert report.checks == dict.fromkeys(report.checks, True), report.checks
    assert report.missing_steps == []
    assert report.duplicate_steps == 0
    assert report.duplicate_groups == 0
    assert report.lost_trajectories == 0
    assert report.orphans == []
    assert report.orphan_workspaces == []
    assert report.recoveries, "no worker died holding a group"
    assert all(r.recovered_s is not None for r in report.recoveries)
    assert report.recovery_s_max <= 60
