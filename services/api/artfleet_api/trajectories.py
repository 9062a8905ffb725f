"""Sampled trajectories on disk, for the console's browser.

Layout (written by the trainer's trajectory sampling): `<dir>/<experiment>/step_<n>/<name>.json`,
one trajectory per file, in the shape of `TrajectoryOut`:
`{messages, tools, reward, metrics, metadata: {scenario_id, step, policy_version, ...}}`.
Files that do not parse are skipped in lists and a 422 when read."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi import Path as PathParam
from pydantic import ValidationError

from artfleet_api.errors import ApiError
from artfleet_api.models import TrajectoryEntry, TrajectoryList, TrajectoryOut
from artfleet_api.routes_jobs import ERRORS

NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
_STEP_DIR = re.compile(r"^step_(\d{1,9})$")
router = APIRouter(responses=ERRORS)


@dataclass(frozen=True)
class Filters:
    experiment: str | None = None
    step: int | None = None
    scenario: str | None = None
    min_reward: float | None = None
    max_reward: float | None = None

    def keep(self, entry: TrajectoryEntry) -> bool:
        return (
            (self.scenario is None or entry.scenario_id == self.scenario)
            and (self.min_reward is None or entry.reward >= self.min_reward)
            and (self.max_reward is None or entry.reward <= self.max_reward)
        )


def read_trajectory(path: Path) -> TrajectoryOut:
    return TrajectoryOut.model_validate(json.loads(path.read_text()))


def _entry(root: Path, path: Path, step: int) -> TrajectoryEntry | None:
    try:
        trajectory = read_trajectory(path)
    except (OSError, ValueError, ValidationError):
        return None
    version = trajectory.metadata.get("policy_version")
    return TrajectoryEntry(
        path=path.relative_to(root).as_posix(),
        experiment=path.parent.parent.name,
        step=step,
        reward=trajectory.reward,
        scenario_id=str(trajectory.metadata.get("scenario_id") or ""),
        policy_version=version if isinstance(version, int) else None,
    )


def list_trajectories(root: Path, filters: Filters, limit: int) -> TrajectoryList:
    experiments = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    entries: list[TrajectoryEntry] = []
    for experiment in experiments:
        if filters.experiment is not None and experiment != filters.experiment:
            continue
        for step_dir in sorted((root / experiment).iterdir()):
            match = _STEP_DIR.match(step_dir.name)
            if not match or (filters.step is not None and int(match.group(1)) != filters.step):
                continue
            for path in sorted(step_dir.glob("*.json")):
                entry = _entry(root, path, int(match.group(1)))
                if entry is not None and filters.keep(entry):
                    entries.append(entry)
                    if len(entries) >= limit:
                        return TrajectoryList(trajectories=entries, experiments=experiments)
    return TrajectoryList(trajectories=entries, experiments=experiments)


def _step_dir(experiment: Path, step: int) -> Path:
    """`step_<n>`, zero-padded or not."""
    if experiment.is_dir():
        for child in experiment.iterdir():
            match = _STEP_DIR.match(child.name)
            if match and int(match.group(1)) == step:
                return child
    return experiment / f"step_{step}"


def _root(request: Request) -> Path:
    return Path(request.app.state.settings.trajectories_dir)


@router.get("/trajectories", response_model=TrajectoryList, tags=["trajectories"])
async def trajectories(
    request: Request,
    experiment: Annotated[str | None, Query(pattern=NAME)] = None,
    step: Annotated[int | None, Query(ge=0, le=999_999_999)] = None,
    scenario: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
    min_reward: Annotated[float | None, Query(allow_inf_nan=False)] = None,
    max_reward: Annotated[float | None, Query(allow_inf_nan=False)] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 500,
) -> TrajectoryList:
    """Sampled trajectories, filtered by experiment, step, scenario and reward."""
    filters = Filters(experiment, step, scenario, min_reward, max_reward)
    return list_trajectories(_root(request), filters, limit)


@router.get(
    "/trajectories/{experiment}/{step}/{name}", response_model=TrajectoryOut, tags=["trajectories"]
)
async def trajectory(
    request: Request,
    experiment: Annotated[str, PathParam(pattern=NAME)],
    step: Annotated[int, PathParam(ge=0, le=999_999_999)],
    name: Annotated[str, PathParam(pattern=NAME)],
) -> TrajectoryOut:
    """One sampled trajectory: messages, tool calls, observations, reward components."""
    file = name if name.endswith(".json") else f"{name}.json"
    path = _step_dir(_root(request) / experiment, step) / file
    if not path.is_file():
        raise ApiError(404, f"no trajectory {experiment}/step_{step}/{file}", "name")
    try:
        return read_trajectory(path)
    except (OSError, ValueError, ValidationError) as exc:
        raise ApiError(422, f"unreadable trajectory file: {type(exc).__name__}", "name") from None
