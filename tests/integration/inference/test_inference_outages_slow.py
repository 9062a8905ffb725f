"""A job survives inference outages on a local fleet with the vLLM engine: the whole fleet
stopped mid-step and started again with the inference service held back past the
workers' retries, and the inference process group SIGKILLed mid-step and started late.
Each case runs a 2-step job end to end and checks every trajectory of every step.

Each case starts vLLM twice on top of a job: 6-10 minutes on a 2-core machine, which CI's
budget does not hold, so it runs where ARTFLEET_OUTAGE_TESTS=1 is set; the same cases,
repeated with their recovery figures, are `bench/chaos_bench.py --inference N`. CI runs the
logic underneath on real Redis (tests/integration/trainer/test_job_runner.py: no dispatch before
the policy serves, the budget) and the group hold (tests/unit/rollout/test_policy_outage.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from inference_outage import kill_mid_step, new_fleet, restart_mid_job

from artfleet.v1 import common_pb2 as pb
from artfleet_cli.fleet import vllm_python

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("ARTFLEET_OUTAGE_TESTS") != "1",
        reason="minutes of vLLM restarts: set ARTFLEET_OUTAGE_TESTS=1 (or run the bench)",
    ),
]


@pytest.fixture
def vllm(require_infra: Callable[[bool, str], None]) -> None:
    require_infra(bool(vllm_python()), "no Python with vLLM (make install builds .venv-vllm)")


def test_a_restart_with_inference_held_back_loses_nothing(tmp_path: Path, vllm: None) -> None:
    fleet = new_fleet(tmp_path)
    fleet.start(timeout_s=900)
    try:
        run, fleet = restart_mid_job(fleet, hold_s=90, log=print)
    finally:
        fleet.stop()
    assert run.job.state == pb.JOB_STATE_SUCCEEDED, run.job.error
    assert run.ok, [(s.step, s.trajectories) for s in run.job.steps]


def test_inference_killed_mid_step_loses_nothing(tmp_path: Path, vllm: None) -> None:
    fleet = new_fleet(tmp_path)
    fleet.start(timeout_s=900)
    try:
        run = kill_mid_step(fleet, hold_s=30)
    finally:
        fleet.stop()
    assert run.job.state == pb.JOB_STATE_SUCCEEDED, run.job.error
    assert run.ok, [(s.step, s.trajectories) for s in run.job.steps]
