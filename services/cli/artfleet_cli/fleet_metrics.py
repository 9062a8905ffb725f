"""A local fleet's Prometheus: a configuration for `fleet up`'s own targets, written into
its workdir, and the command that runs Debian's (or any) `prometheus` on it.

Each service is scraped under its own name as job name, as the compose stack's
`prometheus/prometheus.yml` names them, with the same intervals, so the provisioned
Grafana dashboards (`grafana/`) and the alert rules (`prometheus/rules/`) read a local
fleet as they read the stack; tests/unit/cli/test_fleet_metrics.py holds the two equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

CONFIG_FILE = "prometheus.yml"
DATA_DIR = "prometheus"
LOOPBACK = "127.0.0.1"  # Prometheus' UI and API: for this machine's user only
# The stack's: a short job still leaves enough samples for rate() over 1m.
GLOBAL = {"scrape_interval": "5s", "scrape_timeout": "4s", "evaluation_interval": "5s"}
SELF_JOB = "prometheus"
# The stack's alert rules, where a checkout (`make install`: editable) has them.
RULES_DIR = Path(__file__).resolve().parents[3] / "prometheus" / "rules"


def prometheus_config(
    targets: Mapping[str, str], own: str, rules_dir: Path | None = RULES_DIR
) -> dict[str, Any]:
    """`targets`: service -> host:port of its /metrics; `own`: Prometheus' listen address."""
    jobs = [
        {"job_name": name, "static_configs": [{"targets": [target]}]}
        for name, target in targets.items()
    ]
    jobs.append({"job_name": SELF_JOB, "static_configs": [{"targets": [own]}]})
    config: dict[str, Any] = {"global": dict(GLOBAL), "scrape_configs": jobs}
    if rules_dir is not None and rules_dir.is_dir():
        config["rule_files"] = [str(rules_dir / "*.yml")]
    return config


def write_config(path: Path, config: Mapping[str, Any]) -> None:
    """The configuration, with a comment saying whose it is (rewritten at every start)."""
    head = "# Written by `artfleet fleet up` at each start: this fleet's metrics endpoints.\n"
    path.write_text(head + yaml.safe_dump(dict(config), sort_keys=False))


def prometheus_command(binary: str, config: Path, data_dir: Path, listen: str) -> list[str]:
    return [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={data_dir}",
        f"--web.listen-address={listen}",
    ]
