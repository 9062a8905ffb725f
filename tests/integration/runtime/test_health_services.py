"""The health monitor in a real service process: a sandbox replica
(`python -m artfleet_sandbox`, local backend) whose session fills its work directory past
ARTFLEET_HEALTH_MAX_DIR_BYTES raises the finding gauge on its /metrics and logs the
finding, keeps serving, and reports an hour-old session dir as stale. A real Prometheus
(Debian's package) scrapes it with the stack's alert rules: the overview's health panels
(ids 152, 300-303) return data and the critical alert goes pending. Every service builds
its monitor from its settings, and each entrypoint run as a process exposes its gauges."""

from __future__ import annotations

import functools
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from pydantic import SecretStr
from repo_paths import ROOT
from waiting import wait_for

from artfleet.runtime.rpc.client import auth_metadata
from artfleet.runtime.service import free_port
from artfleet.v1 import sandbox_pb2, sandbox_pb2_grpc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
TOKEN = "health-" + secrets.token_hex(8)
LIMIT = 2_000_000
HEALTH_PANELS = range(300, 310)


@dataclass
class Replica:
    process: subprocess.Popen[bytes]
    target: str
    metrics_url: str
    log: Path
    workspace: Path


def scrape(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return str(answer.read().decode())
    except OSError:
        return ""


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the series `name{labels...}` in a Prometheus text exposition."""
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            return float(value)
    return None


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[Replica]:
    workspace, port, metrics_port = tmp_path / "ws", free_port(), free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "ARTFLEET_API_TOKEN": TOKEN,
        "ARTFLEET_PORT": str(port),
        "ARTFLEET_METRICS_PORT": str(metrics_port),
        "ARTFLEET_SANDBOX_BACKEND": "local",
        "ARTFLEET_SANDBOX_ALLOW_UNISOLATED": "true",  # machines without bubblewrap too
        "ARTFLEET_TEST_RUNTIME": "false",
        "ARTFLEET_WORKSPACE_ROOT": str(workspace),
        "ARTFLEET_CACHE_DIR": str(tmp_path / "cache"),
        "ARTFLEET_HEALTH_INTERVAL_S": "0.2",
        "ARTFLEET_HEALTH_MAX_DIR_BYTES": str(LIMIT),
        "ARTFLEET_HEALTH_MIN_FREE_BYTES": "0",  # this machine's /tmp is not under test
    }
    log = tmp_path / "sandbox.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "artfleet_sandbox"], env=env, stdout=out, stderr=out
        )
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"

    def checked() -> bool:
        if process.poll() is not None:
            pytest.fail(f"the sandbox exited: {log.read_text()[-2000:]}")
        return "artfleet_health_dir_bytes" in scrape(metrics_url)

    try:
        wait_for("the sandbox's health gauges", checked)
        yield Replica(process, f"127.0.0.1:{port}", metrics_url, log, workspace)
    finally:
        process.terminate()
        process.wait(30)


def test_a_session_filling_its_work_dir_raises_the_gauge_and_a_warning(replica: Replica) -> None:
    finding = {"service": "sandbox", "check": "dir_size", "severity": "critical"}
    # The series exists once the monitor's first check ran (later on a loaded machine).
    wait_for(
        "the first health check",
        lambda: sample(scrape(replica.metrics_url), "artfleet_health_findings", **finding) == 0,
    )
    with grpc.insecure_channel(replica.target) as channel:
        stub = sandbox_pb2_grpc.SandboxStub(channel)
        meta = auth_metadata(TOKEN)
        session = stub.CreateSession(sandbox_pb2.CreateSessionRequest(), metadata=meta, timeout=60)

        def run(command: str) -> sandbox_pb2.ExecResult:
            request = sandbox_pb2.ExecRequest(session_id=session.session_id, command=command)
            result: sandbox_pb2.ExecResult = stub.Exec(request, metadata=meta, timeout=60)
            return result

        assert run(f"head -c {LIMIT + 500_000} /dev/zero > fill.bin").exit_code == 0
        wait_for(
            "the critical dir_size finding",
            lambda: sample(scrape(replica.metrics_url), "artfleet_health_findings", **finding) == 1,
        )
        text = wait_for(
            "the finding in the log", lambda: "over the limit" in replica.log.read_text()
        )
        assert text
        line = next(x for x in replica.log.read_text().splitlines() if "over the limit" in x)
        assert "ERROR sandbox" in line and "health (sandbox)" in line, line
        # A critical finding never stops the service: the session still works.
        assert run("echo still-here").stdout.strip() == b"still-here"
        # An hour-old session dir is stale.
        root = next(replica.workspace.glob("artfleet-sandbox-*"))
        session_dir = next(p for p in root.iterdir() if p.is_dir())  # beside .owner.json
        two_hours_ago = time.time() - 7200
        for touched in [session_dir, *session_dir.iterdir()]:
            os.utime(touched, (two_hours_ago, two_hours_ago))
        stale = {"service": "sandbox", "path": str(root)}
        wait_for(
            "the stale session dir",
            lambda: sample(scrape(replica.metrics_url), "artfleet_health_stale_dirs", **stale) == 1,
        )
        assert "untouched for over 3600s" in replica.log.read_text()
        assert replica.process.poll() is None


def _overview_health_queries() -> list[str]:
    board = json.loads((ROOT / "grafana" / "dashboards" / "overview.json").read_text())
    panels = [p for p in board["panels"] if p["id"] == 152 or p["id"] in HEALTH_PANELS]
    assert {p["id"] for p in panels} >= {152, 300, 301, 302, 303}
    return [t["expr"] for p in panels for t in p["targets"]]


def _prometheus_query(url: str, expr: str) -> list[Any]:
    query = urllib.parse.urlencode({"query": expr})
    body = json.loads(scrape(f"{url}/api/v1/query?{query}") or "{}")
    assert body.get("status", "success") == "success", body
    return list(body.get("data", {}).get("result", []))


def _alerts(url: str) -> list[dict[str, Any]]:
    body = json.loads(scrape(f"{url}/api/v1/alerts") or "{}")
    return list(body.get("data", {}).get("alerts", []))


def test_prometheus_runs_the_health_panels_and_alert_rules(
    replica: Replica, tmp_path: Path, require_infra: Callable[[bool, str], None]
) -> None:
    binary = shutil.which("prometheus")
    require_infra(binary is not None, "prometheus (Debian: prometheus) not installed")
    assert binary is not None
    rules = ROOT / "prometheus" / "rules" / "health.yml"
    check = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True)
    assert check.returncode == 0, check.stdout + check.stderr
    metrics = urllib.parse.urlparse(replica.metrics_url)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {"job_name": "sandbox", "static_configs": [{"targets": [metrics.netloc]}]}
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    web = f"127.0.0.1:{free_port()}"
    with grpc.insecure_channel(replica.target) as channel:  # fill past the limit
        stub = sandbox_pb2_grpc.SandboxStub(channel)
        meta = auth_metadata(TOKEN)
        session = stub.CreateSession(sandbox_pb2.CreateSessionRequest(), metadata=meta, timeout=60)
        command = f"head -c {LIMIT + 1} /dev/zero > fill.bin"
        request = sandbox_pb2.ExecRequest(session_id=session.session_id, command=command)
        assert stub.Exec(request, metadata=meta, timeout=60).exit_code == 0
    prometheus = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address={web}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://{web}"
    try:
        for expr in _overview_health_queries():
            wait_for(f"data for {expr}", functools.partial(_prometheus_query, url, expr), 120)
        pending = wait_for(
            "the critical health alert",
            lambda: [
                a
                for a in _alerts(url)
                if a["labels"].get("alertname") == "ArtfleetHealthCritical"
                and a["labels"].get("check") == "dir_size"
                and a["labels"].get("service") == "sandbox"
            ],
            120,
        )
        assert pending[0]["state"] in ("pending", "firing")
    finally:
        prometheus.terminate()
        prometheus.wait(30)


def test_every_service_builds_its_monitor_from_its_settings(tmp_path: Path) -> None:
    from artfleet_api.server import ApiServer
    from artfleet_api.settings import ApiSettings
    from artfleet_reward.__main__ import RewardApp
    from artfleet_reward.settings import RewardSettings

    extra = str(tmp_path / "extra")
    token = SecretStr(TOKEN)
    common: dict[str, Any] = {"health_interval_s": 5, "health_max_child_processes": 7}
    common["health_work_dirs"] = [extra]
    reward = RewardApp(RewardSettings(api_token=token, **common)).health
    logs = str(tmp_path / "logs")
    api = ApiServer(ApiSettings(api_token=token, trajectories_dir=logs, **common)).health
    for monitor, service in ((reward, "reward"), (api, "api")):
        assert monitor.service == service
        assert monitor.limits.interval_s == 5 and monitor.limits.max_child_processes == 7
        assert [str(p) for p in monitor.work_dirs] == [extra]
    assert [str(p) for p in api.store_dirs] == [str(tmp_path / "logs")]


@pytest.mark.parametrize("service", ["trainer", "rollout", "reward", "api"])
def test_every_service_process_runs_its_monitor(
    service: str, redis_url: str, tmp_path: Path
) -> None:
    """Each entrypoint as deployed: its /metrics carries its health gauges, checked on the
    interval its settings give."""
    metrics_port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "ARTFLEET_API_TOKEN": TOKEN,
        "ARTFLEET_REDIS_URL": redis_url,
        "ARTFLEET_PORT": str(free_port()),
        "ARTFLEET_METRICS_PORT": str(metrics_port),
        "ARTFLEET_HEALTH_INTERVAL_S": "0.2",
        "ARTFLEET_HEALTH_WORK_DIRS": json.dumps([str(tmp_path / "work")]),
        "ARTFLEET_ART_PATH": str(tmp_path / "art"),
        "ARTFLEET_TRAJECTORY_LOG_DIR": str(tmp_path / "logs"),
    }
    (tmp_path / "work" / "r1").mkdir(parents=True)
    (tmp_path / "work" / "r1" / "out").write_bytes(b"x" * 4096)
    log = tmp_path / f"{service}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", f"artfleet_{service}"], env=env, stdout=out, stderr=out
        )
    url = f"http://127.0.0.1:{metrics_port}/metrics"

    def gauges() -> str:
        if process.poll() is not None:
            pytest.fail(f"{service} exited: {log.read_text()[-2000:]}")
        text = scrape(url)
        work = {"service": service, "path": str(tmp_path / "work")}
        size = sample(text, "artfleet_health_dir_bytes", **work)
        return text if size == 4096 else ""

    try:
        text = wait_for(f"{service}'s health gauges", gauges, 180)
        assert sample(text, "artfleet_health_child_processes", service=service) is not None
        assert sample(text, "artfleet_health_free_bytes", service=service, path="/tmp")
    finally:
        process.terminate()
        process.wait(60)
