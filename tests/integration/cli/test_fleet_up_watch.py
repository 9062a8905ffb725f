"""`artfleet fleet up` keeps its processes and ends with them: a service killed under it is
reported and restarted, once more than ARTFLEET_FLEET_MAX_RESTARTS allow it stops the
fleet (exit 1); a SIGTERM while it starts (the HTTP API already answering 503) and a
start past --start-timeout leave no process of it behind. Torch engine: no vLLM."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fleet_jobs import submit_small, wait_event
from fleet_up_process import FleetUp, left_behind
from job_wait import wait_ended
from waiting import wait_for

from artfleet.runtime.rpc.client import sync_channel
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2, trainer_pb2_grpc

pytestmark = [pytest.mark.integration]


def _command(workdir: Path, *flags: str) -> list[str]:
    up = (sys.executable, "-m", "artfleet_cli.main", "fleet", "up")
    return [*up, "--workdir", str(workdir), "--engine", "torch", *flags]


def _env() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ARTFLEET_")}
    return {**clean, "ARTFLEET_SANDBOX_BACKEND": "local"}


@pytest.fixture
def fleets() -> Iterator[list[FleetUp]]:
    started: list[FleetUp] = []
    yield started
    for fleet in started:  # a failed test still stops what it started
        fleet.stop()


def test_a_killed_service_is_restarted_until_its_bound_then_the_fleet_stops(
    tmp_path: Path, fleets: list[FleetUp]
) -> None:
    workdir = tmp_path / "fleet"
    cmd = _command(workdir, "--set", "ARTFLEET_FLEET_MAX_RESTARTS=1")
    fleet = FleetUp(cmd, _env(), tmp_path / "up.out")
    fleets.append(fleet)
    fleet.wait_up()
    api = f"http://127.0.0.1:{json.loads((workdir / 'ports.json').read_text())['api']}"

    first = fleet.started_pids()["reward"][-1]
    os.kill(first, signal.SIGKILL)
    fleet.wait_line(rf"reward was killed by SIGKILL \(pid {first}\); restarting it")
    again = int(fleet.wait_line(r"restarted reward \(pid (\d+)\)").group(1))
    assert again != first
    # Started again as it was: the same port, serving the API's /health check.
    wait_for("the restarted reward service serving", lambda: _ok(api, "reward"), 300, 0.5)

    os.kill(again, signal.SIGKILL)  # one exit more than ARTFLEET_FLEET_MAX_RESTARTS=1
    assert fleet.proc.wait(300) == 1
    out = fleet.text()
    assert f"reward was killed by SIGKILL (pid {again}), after 1 restart(s)" in out
    assert "ARTFLEET_FLEET_MAX_RESTARTS=1" in out and "the fleet is stopped" in out
    assert left_behind(workdir) == []


def test_a_killed_trainer_is_restarted_and_its_running_job_finishes(
    tmp_path: Path, fleets: list[FleetUp]
) -> None:
    workdir = tmp_path / "fleet"
    fleet = FleetUp(_command(workdir), _env(), tmp_path / "up.out")
    fleets.append(fleet)
    fleet.wait_up()
    target = f"127.0.0.1:{json.loads((workdir / 'ports.json').read_text())['trainer']}"
    token = (workdir / "token").read_text().strip()
    with sync_channel(target, token) as channel:
        trainer = trainer_pb2_grpc.TrainerStub(channel)
        job = submit_small(trainer, name="killed", steps=2)
        events = trainer.WatchJob(trainer_pb2.WatchJobRequest(job_id=job.id), timeout=900)
        wait_event(events, pb.EVENT_KIND_STEP_STARTED, 1)
        first = fleet.started_pids()["trainer"][-1]
        os.kill(first, signal.SIGKILL)  # as the OOM killer does
        fleet.wait_line(rf"trainer was killed by SIGKILL \(pid {first}\); restarting it")
        again = int(fleet.wait_line(r"restarted trainer \(pid (\d+)\)").group(1))
        assert again != first
        job = wait_ended(trainer, job.id, timeout_s=900)  # the restarted trainer resumes it
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    assert [s.step for s in job.steps] == [1, 2]
    assert fleet.stop() == 0
    assert left_behind(workdir) == []


def test_sigterm_while_starting_stops_every_process_it_started(
    tmp_path: Path, fleets: list[FleetUp]
) -> None:
    workdir = tmp_path / "fleet"
    fleet = FleetUp(_command(workdir), _env(), tmp_path / "up.out")
    fleets.append(fleet)
    # The trainer (the policy's server) held before it serves: the start cannot finish.
    trainer = int(fleet.wait_line(r"started trainer \(pid (\d+)").group(1))
    os.kill(trainer, signal.SIGSTOP)
    api = f"http://127.0.0.1:{json.loads((workdir / 'ports.json').read_text())['api']}"
    # The API starts first: while the rest start, /health answers 503 naming what is down.
    health = wait_for("the API's /health answering", lambda: _health(api), 300, 0.5)
    assert health is not None and health.status_code == 503
    down = {n for n, d in health.json()["dependencies"].items() if not d["ok"]}
    assert {"trainer", "inference"} <= down
    assert "  source " not in fleet.text()  # not up

    fleet.proc.send_signal(signal.SIGTERM)
    assert fleet.proc.wait(180) == 128 + signal.SIGTERM
    assert "stopped by SIGTERM while starting" in fleet.text()
    started = fleet.started_pids()
    assert {"redis", "api", "sandbox", "reward", "rollout", "trainer"} <= started.keys()
    assert left_behind(workdir) == []


def test_a_start_past_its_timeout_names_the_service_and_what_to_raise(tmp_path: Path) -> None:
    workdir = tmp_path / "fleet"
    done = subprocess.run(
        _command(workdir, "--start-timeout", "0.01"),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    slow = re.search(r"error: (\w+) was not ready in time \(\1 did not ", done.stderr)
    assert slow and slow.group(1) in FleetUp.started_in(done.stdout), done.stderr
    assert "raise --start-timeout (now 0.01 s) or ARTFLEET_FLEET_START_TIMEOUT_S" in done.stderr
    assert left_behind(workdir) == []

    refused = subprocess.run(
        _command(workdir, "--start-timeout", "0"), env=_env(), capture_output=True, text=True
    )
    assert refused.returncode == 2 and "--start-timeout" in refused.stderr
    assert "started" not in refused.stdout


def _health(api: str) -> httpx.Response | None:
    try:
        return httpx.get(f"{api}/health", timeout=30)
    except httpx.TransportError:
        return None


def _ok(api: str, dependency: str) -> bool:
    reply = _health(api)
    return reply is not None and bool(reply.json()["dependencies"][dependency]["ok"])
