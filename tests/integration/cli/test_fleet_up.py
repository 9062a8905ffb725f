"""`artfleet fleet up` as a user runs it: settings from the environment, an env file and
--set reach the HTTP API (seen in the job it submits), fleet.env can be sourced, the
policy is served once it is up (the API's /health), Prometheus (when installed) scrapes
it, and a restart without the flags serves the same endpoints with the same token and
the settings it remembered."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fleet_shell import sourced
from fleet_up_process import FleetUp
from log_scan import leaked_secrets

from artfleet.specs.job import DEFAULT_BASE_MODEL

pytestmark = [pytest.mark.integration]

HOSTED = "Qwen/Qwen2.5-7B-Instruct"  # what the HTTP training API's examples name


@pytest.fixture
def run_fleet(tmp_path: Path) -> Iterator[list[FleetUp]]:
    started: list[FleetUp] = []
    yield started
    for fleet in started:  # a failed test still stops what it started
        fleet.stop()


def test_fleet_up_takes_settings_and_keeps_its_endpoints(
    tmp_path: Path, run_fleet: list[FleetUp]
) -> None:
    workdir = tmp_path / "fleet"
    settings = tmp_path / "fleet-settings.env"
    settings.write_text(
        "# the judge of the HTTP API's /train bodies is this fleet's own policy\n"
        'ARTFLEET_JUDGE_MODEL_MAP={"gpt-4o": "policy"}\n'
        f"ARTFLEET_BASE_MODEL_MAP='{json.dumps({HOSTED: 'overridden-by-set'})}'\n"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ARTFLEET_")}
    env = {
        **clean,
        "ARTFLEET_ENVIRONMENT": "math-single",  # only here: passed through
        "ARTFLEET_JUDGE_MODEL_MAP": '{"gpt-4o": "gpt-4o"}',  # the env file wins
        "ARTFLEET_SANDBOX_BACKEND": "local",
        # A stale fleet.env sourced in this shell: the fleet's own variables are its own.
        "ARTFLEET_API_TOKEN": "stale-token-from-another-fleet",
        "ARTFLEET_TRAINER_TARGET": "127.0.0.1:1",
    }
    bare = [
        *(sys.executable, "-m", "artfleet_cli.main", "fleet", "up"),
        *("--workdir", str(workdir), "--engine", "torch"),
    ]
    cmd = [
        *bare,
        *("--env-file", str(settings)),
        *("--set", f"ARTFLEET_BASE_MODEL_MAP={json.dumps({HOSTED: DEFAULT_BASE_MODEL})}"),
    ]
    first = FleetUp(cmd, env, tmp_path / "up-1.out")
    run_fleet.append(first)
    first.wait_up()
    env_file = workdir / "fleet.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    before = sourced(env_file)
    token = before["ARTFLEET_API_TOKEN"]
    assert token != env["ARTFLEET_API_TOKEN"] and token not in first.text()
    banner = first.text().splitlines()[-4:]
    assert banner[-1] == "  source fleet/fleet.env" and all(len(line) <= 80 for line in banner)

    job = _train(before)
    assert job["spec"]["base_model"] == DEFAULT_BASE_MODEL  # --set over the env file
    assert job["spec"]["environment"] == "math-single"  # from the environment
    ruler = next(s for s in job["spec"]["reward"]["scorers"] if s["name"] == "ruler")
    assert json.loads(ruler["params_json"])["judge"] == "policy"  # env file over environment
    for key in ("TRAINER", "ROLLOUT", "REWARD", "SANDBOX", "API"):
        assert httpx.get(before[f"ARTFLEET_{key}_METRICS_URL"], timeout=30).status_code == 200
    # Up means the policy is served too: the API's /health names it.
    health = httpx.get(f"{before['ARTFLEET_API_URL']}/health", timeout=30)
    assert health.status_code == 200 and health.json()["dependencies"]["inference"]["ok"]
    if shutil.which("prometheus"):
        ready = httpx.get(f"{before['ARTFLEET_PROMETHEUS_URL']}/-/ready", timeout=30)
        assert ready.status_code == 200
    assert first.stop() == 0

    # Without --env-file and --set: the settings remembered from the first start apply.
    second = FleetUp(bare, env, tmp_path / "up-2.out")
    run_fleet.append(second)
    second.wait_up()
    assert sourced(env_file) == before  # same ports, same token, same Redis
    assert "using the settings remembered from " in second.text()
    again = _train(before)
    assert again["spec"]["base_model"] == DEFAULT_BASE_MODEL  # the remembered --set
    ruler = next(s for s in again["spec"]["reward"]["scorers"] if s["name"] == "ruler")
    assert json.loads(ruler["params_json"])["judge"] == "policy"  # remembered over environ
    headers = {"Authorization": f"Bearer {token}"}
    jobs = httpx.get(f"{before['ARTFLEET_API_URL']}/jobs", headers=headers, timeout=60)
    assert job["id"] in {j["id"] for j in jobs.json()["jobs"]}  # the same fleet, restarted

    # A third start in the same workdir finds the ports in use and says which.
    third = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert third.returncode == 1, third.stderr
    assert "in use by another process" in third.stderr and "--new-ports" in third.stderr
    assert f"{before['ARTFLEET_TRAINER_TARGET'].split(':')[1]} (trainer)" in third.stderr

    assert second.stop() == 0
    assert leaked_secrets(workdir, {"API token": token}) == []
    assert token not in second.text() + third.stderr + third.stdout


def _train(endpoints: dict[str, str]) -> dict[str, Any]:
    """POST /train as the HTTP training API's example does, then cancel the job."""
    body = {
        "model_name": "agent",
        "project": "fleet-up",
        "base_model": HOSTED,
        "num_steps": 1,
        "batch_size": 2,
        "use_ruler": True,
        "judge_model": "gpt-4o",
        "max_turns": 1,
        "max_tokens": 8,
    }
    headers = {"Authorization": f"Bearer {endpoints['ARTFLEET_API_TOKEN']}"}
    with httpx.Client(base_url=endpoints["ARTFLEET_API_URL"], headers=headers, timeout=120) as c:
        reply = c.post("/train", json=body)
        assert reply.status_code == 202, reply.text
        job: dict[str, Any] = reply.json()["job"]
        assert c.post(f"/jobs/{job['id']}/cancel").status_code == 200
    return job
