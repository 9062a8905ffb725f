#!/usr/bin/env python3
"""Checks of the e2e run (tests/e2e/run.sh) against the real stack; stdlib only.

    check_stack.py dashboards                       # structure of grafana/ (no stack needed)
    check_stack.py all --prometheus URL --sandbox-replicas 2 --rollout-replicas 2

`dashboards`: every dashboard JSON is one Grafana can load (uid, title, schemaVersion,
unique panel ids, gridPos inside 24 columns without overlaps, targets with refId and expr,
the provisioned Prometheus datasource), and the provisioning files point at them.
`all` adds: every scraped replica is up; each sandbox replica served sessions; every
PromQL expression of every dashboard returns at least one finite sample. Panels whose
description starts with "[gpu-only]" are skipped (named in the output): no GPU here.
Panels marked "[needs a <kind> job]" (tool, MCP, repo-task, SFT series exist only once
such a job ran; the e2e job is one shell job) have their queries run and must be valid
PromQL, but need not have data (named in the output).
Exit 0 when everything holds, 1 otherwise (each failure printed).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "grafana" / "dashboards"
PROVISIONING = ROOT / "grafana" / "provisioning"
DATASOURCE_UID = "artfleet-prometheus"
GPU_ONLY = "[gpu-only]"
NEEDS_JOB = re.compile(r"^\[needs an? ([\w -]+) job\]")
PANEL_TYPES = {"timeseries", "stat", "gauge", "bargauge", "table", "text", "row"}


def load_dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))}


def _overlaps(a: dict[str, int], b: dict[str, int]) -> bool:
    return (
        a["x"] < b["x"] + b["w"]
        and b["x"] < a["x"] + a["w"]
        and a["y"] < b["y"] + b["h"]
        and b["y"] < a["y"] + a["h"]
    )


def panel_problems(name: str, panel: dict[str, Any], refs: set[str]) -> list[str]:
    where = f"{name} panel {panel.get('id')} {panel.get('title')!r}"
    out = []
    if panel.get("type") not in PANEL_TYPES:
        out.append(f"{where}: unknown type {panel.get('type')!r}")
    pos = panel.get("gridPos", {})
    if not all(isinstance(pos.get(k), int) for k in ("x", "y", "w", "h")):
        out.append(f"{where}: gridPos needs integer x, y, w, h")
    elif pos["x"] < 0 or pos["w"] < 1 or pos["x"] + pos["w"] > 24 or pos["h"] < 1:
        out.append(f"{where}: gridPos {pos} outside the 24-column grid")
    if panel.get("datasource", {}).get("uid") != DATASOURCE_UID:
        out.append(f"{where}: datasource is not {DATASOURCE_UID!r}")
    targets = panel.get("targets", [])
    if panel.get("type") != "text" and not targets:
        out.append(f"{where}: no targets")
    ids = [t.get("refId") for t in targets]
    if len(set(ids)) != len(ids) or not all(ids):
        out.append(f"{where}: refIds missing or repeated: {ids}")
    for t in targets:
        if not str(t.get("expr", "")).strip():
            out.append(f"{where}: target {t.get('refId')} has no expr")
        if t.get("datasource", {}).get("uid", DATASOURCE_UID) not in refs:
            out.append(f"{where}: target {t.get('refId')} names an unknown datasource")
    return out


def dashboard_problems(name: str, board: dict[str, Any]) -> list[str]:
    out = []
    for key, kind in (("uid", str), ("title", str), ("schemaVersion", int), ("panels", list)):
        if not isinstance(board.get(key), kind):
            out.append(f"{name}: {key!r} missing or not {kind.__name__}")
    panels = board.get("panels", [])
    ids = [p.get("id") for p in panels]
    if len(set(ids)) != len(ids):
        out.append(f"{name}: repeated panel ids {ids}")
    for p in panels:
        out += panel_problems(name, p, {DATASOURCE_UID})
    placed = [p["gridPos"] for p in panels if isinstance(p.get("gridPos"), dict)]
    for i, a in enumerate(placed):
        out += [f"{name}: panels overlap at {a}" for b in placed[i + 1 :] if _overlaps(a, b)]
    return out


def check_dashboards() -> list[str]:
    boards = load_dashboards()
    out = [] if boards else [f"no dashboards in {DASHBOARDS}"]
    uids = [b.get("uid") for b in boards.values()]
    if len(set(uids)) != len(uids):
        out.append(f"dashboard uids repeat: {uids}")
    for name, board in boards.items():
        out += dashboard_problems(name, board)
    wanted = {"overview", "rollout", "sandbox", "reward", "trainer"}
    missing = wanted - {n.removesuffix(".json") for n in boards}
    out += [f"missing dashboard {m}.json" for m in sorted(missing)]
    datasources = (PROVISIONING / "datasources" / "prometheus.yml").read_text()
    if f"uid: {DATASOURCE_UID}" not in datasources:
        out.append(f"the provisioned datasource does not have uid {DATASOURCE_UID}")
    providers = (PROVISIONING / "dashboards" / "artfleet.yml").read_text()
    compose = (ROOT / "docker-compose.yml").read_text()
    if "path: /etc/grafana/dashboards" not in providers or (
        "./grafana/dashboards:/etc/grafana/dashboards" not in compose
    ):
        out.append("dashboard provider path and the compose mount disagree")
    print(f"dashboards: {len(boards)} files, {sum(len(b['panels']) for b in boards.values())}"
          f" panels checked")  # fmt: skip
    return out


def query(prometheus: str, expr: str) -> list[dict[str, Any]]:
    url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=30) as reply:
        body = json.load(reply)
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    return list(body["data"]["result"])


def finite(result: list[dict[str, Any]]) -> list[float]:
    values = [float(r["value"][1]) for r in result if "value" in r]
    return [v for v in values if math.isfinite(v)]


def check_targets(prometheus: str, sandbox: int, rollout: int) -> list[str]:
    out = []
    for job, want in (
        ("sandbox", sandbox),
        ("rollout", rollout),
        ("trainer", 1),
        ("reward", 1),
        ("inference", 1),
    ):
        up = finite(query(prometheus, f'up{{job="{job}"}} == 1'))
        if len(up) != want:
            out.append(f"{job}: {len(up)} replicas up in Prometheus, expected {want}")
    served = query(prometheus, "sum by (instance) (artfleet_sandbox_sessions_created_total) > 0")
    print(f"sandbox sessions per replica: "
          f"{ {r['metric']['instance']: r['value'][1] for r in served} }")  # fmt: skip
    if len(served) != sandbox:
        out.append(f"{len(served)} of {sandbox} sandbox replicas served sessions")
    # Every rollout replica exports the plugin packages it loaded (the plugin image).
    plugins = query(
        prometheus, 'count by (name, version) (artfleet_rollout_plugins{state="loaded"})'
    )
    loaded = {f"{r['metric']['name']} {r['metric']['version']}": r["value"][1] for r in plugins}
    print(f"plugins loaded (replicas): {loaded}")
    if not loaded or any(int(n) != rollout for n in loaded.values()):
        out.append(f"plugins loaded by {loaded}, expected on each of {rollout} rollout replicas")
    return out


def check_queries(prometheus: str) -> list[str]:
    out, checked, skipped, other_jobs = [], 0, [], []
    for name, board in load_dashboards().items():
        for panel in board["panels"]:
            description = str(panel.get("description", ""))
            if description.startswith(GPU_ONLY):
                skipped.append(f"{name}: {panel['title']}")
                continue
            needs = NEEDS_JOB.match(description)
            for target in panel.get("targets", []):
                checked += 1
                values = finite(query(prometheus, target["expr"]))  # invalid PromQL raises
                status = "ok " if values else "NO DATA"
                print(f"  {status} {name} / {panel['title']} [{target['refId']}]: {values[:4]}")
                if needs and not values:
                    other_jobs.append(f"{name}: {panel['title']} ({needs.group(1)})")
                elif not values:
                    out.append(f"{name} / {panel['title']}: no finite sample: {target['expr']}")
    print(f"promql: {checked} expressions checked; skipped GPU-only panels: {skipped}")
    print(f"promql: valid, no data without their kind of job: {sorted(set(other_jobs))}")
    return out


def wait_for_scrape(prometheus: str, seconds: float = 12.0) -> None:
    """Lets Prometheus scrape the final counters (5 s interval) before asking."""
    deadline = time.monotonic() + 120
    while not finite(query(prometheus, "artfleet_trainer_jobs_finished_total")):
        if time.monotonic() > deadline:
            break
        time.sleep(2)
    time.sleep(seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["dashboards", "all"])
    parser.add_argument("--prometheus", default="http://127.0.0.1:9090")
    parser.add_argument("--sandbox-replicas", type=int, default=2)
    parser.add_argument("--rollout-replicas", type=int, default=2)
    args = parser.parse_args(argv)
    problems = check_dashboards()
    if args.what == "all":
        wait_for_scrape(args.prometheus)
        problems += check_targets(args.prometheus, args.sandbox_replicas, args.rollout_replicas)
        problems += check_queries(args.prometheus)
    for p in problems:
        print(f"FAIL {p}", file=sys.stderr)
    print("checks passed" if not problems else f"{len(problems)} checks failed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
