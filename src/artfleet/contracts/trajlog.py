"""Readable trajectory records: one JSON file per trajectory, in the shape the web console
reads:

    {"messages": [...OpenAI messages incl. tool_calls...], "tools": [...] | null,
     "reward": float, "metrics": {...},
     "metadata": {"scenario_id", "step", "policy_version", "job_id", "experiment", ...},
     "episode": {...} (optional)}

Used for eval outputs (`artfleet eval run --out`) and sampled training rollouts
(`log_sample_rate`, under `logs/<experiment>/step_<n>/`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from artfleet.contracts import messages
from artfleet.v1 import common_pb2 as pb

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def record(
    trajectory: pb.Trajectory,
    metadata: dict[str, Any],
    episode: pb.Episode | None = None,
) -> dict[str, Any]:
    data = messages.trajectory_to_dict(trajectory)
    data["metadata"].setdefault("policy_version", None)
    data["metadata"].update(metadata)
    if trajectory.logs:
        data["logs"] = list(trajectory.logs)
    if episode is not None:
        data["episode"] = json_format.MessageToDict(episode, preserving_proto_field_name=True)
    return data


def write(directory: Path, name: str, data: dict[str, Any]) -> Path:
    """Write one record as `<name>.json` (name made file-safe), atomically enough for a
    reader polling the folder: a temporary name first, then a rename."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{_UNSAFE.sub('_', name)}.json"
    staging = path.with_suffix(".json.tmp")
    staging.write_text(json.dumps(data, indent=2, default=str))
    staging.replace(path)
    return path
