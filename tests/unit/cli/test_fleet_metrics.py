"""A local fleet's metrics the documented way: `fleet up` writes a Prometheus
configuration for its own targets (checked by the real promtool) under the stack's job
names, and runs a `prometheus` it finds as a process it owns: on loopback, its data in
the workdir, stopped with the fleet. Without promtool or prometheus these skip locally
and fail under CI=true."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import yaml
from repo_paths import ROOT
from waiting import wait_for

from artfleet.runtime.service import free_port
from artfleet_cli.fleet import PORT_NAMES, SERVED, LocalFleet
from artfleet_cli.fleet_config import plan_ports

Require = Callable[[bool, str], None]


def _fleet(workdir: Path, **fields: object) -> LocalFleet:
    fleet = LocalFleet(workdir, **fields)  # type: ignore[arg-type]
    fleet.ports = plan_ports(PORT_NAMES, {}, free_port)
    (workdir / "logs").mkdir(parents=True, exist_ok=True)
    return fleet


def test_the_written_config_passes_promtool_and_scrapes_every_service(
    tmp_path: Path, require_infra: Require
) -> None:
    require_infra(shutil.which("promtool") is not None, "promtool (Debian: prometheus) absent")
    fleet = _fleet(tmp_path, engine="vllm")  # every service, the inference one too
    fleet._start_prometheus(time.monotonic() + 10)  # no binary: the configuration only
    path = tmp_path / "prometheus.yml"
    done = subprocess.run(["promtool", "check", "config", str(path)], capture_output=True)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()

    config = yaml.safe_load(path.read_text())
    jobs = {j["job_name"]: j["static_configs"][0]["targets"] for j in config["scrape_configs"]}
    own = [f"127.0.0.1:{fleet.ports['prometheus']}"]
    assert jobs == {
        **{name: [f"127.0.0.1:{fleet.ports[f'{name}_metrics']}"] for name in SERVED},
        "prometheus": own,
    }
    # The stack's job names, intervals and alert rules: the provisioned dashboards and
    # the rules read a local fleet as they read the compose stack.
    stack = yaml.safe_load((ROOT / "prometheus" / "prometheus.yml").read_text())
    assert set(jobs) == {j["job_name"] for j in stack["scrape_configs"]}
    assert config["global"] == stack["global"]
    assert config["rule_files"] == [str(ROOT / "prometheus" / "rules" / "*.yml")]


def _active_jobs(url: str) -> set[str]:
    with urllib.request.urlopen(f"{url}/api/v1/targets", timeout=5) as reply:
        targets = json.load(reply)["data"]["activeTargets"]
    return {t["labels"]["job"] for t in targets}


def test_fleet_up_runs_prometheus_on_loopback_with_its_data_in_the_workdir(
    tmp_path: Path, require_infra: Require
) -> None:
    binary = shutil.which("prometheus")
    require_infra(binary is not None, "prometheus (Debian: prometheus) absent")
    fleet = _fleet(tmp_path, prometheus=binary)  # torch: no inference service
    try:
        fleet._start_prometheus(time.monotonic() + 60)
        url = fleet.endpoints()["ARTFLEET_PROMETHEUS_URL"]
        assert url == f"http://127.0.0.1:{fleet.ports['prometheus']}"
        want = {*fleet.started(), "prometheus"}
        wait_for("Prometheus' targets", lambda: _active_jobs(url) == want, timeout_s=60)
        assert (tmp_path / "prometheus" / "wal").is_dir()  # its TSDB, in the workdir
    finally:
        codes = fleet.stop()
    assert codes == {"prometheus": 0}
