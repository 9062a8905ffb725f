"""The trainer dashboard's sampler/trainer mismatch panels (ids 203-204) on a real
Prometheus (Debian's package) scraping the trainer's metrics: every query returns a finite
sample per engine once a step recorded its mismatch."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import start_http_server
from repo_paths import ROOT
from waiting import wait_for

from artfleet.runtime.ports import PortHold
from artfleet.v1 import common_pb2 as pb
from artfleet_trainer import metrics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
PANELS = {203, 204}


def _queries() -> list[str]:
    board = json.loads((ROOT / "grafana" / "dashboards" / "trainer.json").read_text())
    panels = [p for p in board["panels"] if p["id"] in PANELS]
    assert {p["id"] for p in panels} == PANELS
    return [t["expr"] for p in panels for t in p["targets"]]


def _finite(url: str, expr: str) -> list[Any]:
    query = urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=5) as answer:
            body = json.loads(answer.read())
    except OSError:
        return []
    assert body["status"] == "success", body
    return [r for r in body["data"]["result"] if math.isfinite(float(r["value"][1]))]


def test_the_mismatch_panels_have_data_per_engine(
    tmp_path: Path, require_infra: Callable[[bool, str], None]
) -> None:
    binary = shutil.which("prometheus")
    require_infra(binary is not None, "prometheus (Debian: prometheus) not installed")
    assert binary is not None
    for engine in ("torch", "vllm"):
        step = pb.StepSummary(step=1)
        step.mismatch.CopyFrom(
            pb.SamplerMismatch(engine=engine, tokens=10, k3=0.01, abs_delta_mean=0.1,
                               abs_delta_p99=0.5, ratio_p1=0.7, ratio_p50=1.0, ratio_p99=1.4,
                               outside_0_9_1_1=0.3, outside_0_5_2=0.06, warning="past")
        )  # fmt: skip
        metrics.observe_step(step)
    server, thread = start_http_server(0, addr="127.0.0.1")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "trainer",
                "static_configs": [{"targets": [f"127.0.0.1:{server.server_port}"]}],
            }
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    held = PortHold()  # until Prometheus listens there
    web = f"127.0.0.1:{held.pick()}"
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
    try:
        for expr in _queries():
            found = wait_for(f"data for {expr}", partial(_finite, f"http://{web}", expr), 120)
            assert {r["metric"].get("engine") for r in found} == {"torch", "vllm"}, expr
    finally:
        prometheus.terminate()
        prometheus.wait(30)
        held.release()
        server.shutdown()
        thread.join(10)
