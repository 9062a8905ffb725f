"""Loaders anyone can point a job at: `hud:<path>` and `jsonl:<path>`.

- `hud:` a HUD taskset: a JSON list (or `{"tasks": [...]}`) or JSONL of
  task configs `{id?, prompt, mcp_config, setup_tool?, evaluate_tool, split?,
  system_prompt?}`; the MCP agent runs them.
- `jsonl:` prompts for the single-turn agent: `{prompt, answer?, system?, id?, split?,
  difficulty?}` per line.

Either reads a local file, or a `datasets` dataset saved on disk (`save_to_disk`: a
directory), at load time only. A record without a split goes to `test` when its position
is 4 mod 5 (the fifth, tenth, ...), to `train` otherwise, so a file of five or more has
both splits. Records that cannot become a task are counted in `Environment.skipped` by
reason, never a crash.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from artfleet.specs.hud_config import check_mcp_config

from .base import SPLITS, Environment, McpTask, Scenario, ToolCallSpec

R = TypeVar("R")


class LoaderError(ValueError):
    """The source cannot be read at all (missing file, not JSON): names the source."""


def read_records(source: str) -> list[dict[str, Any]]:
    """The records of a JSON/JSONL file or a `datasets` directory (saved with save_to_disk)."""
    path = Path(source).expanduser()
    if path.is_dir():
        return _from_disk(path)
    if not path.is_file():
        raise LoaderError(f"{source}: no such file or dataset directory")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".jsonl":
            data: Any = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LoaderError(f"{source}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if isinstance(data, dict) and isinstance(data.get("tasks"), list):
        data = data["tasks"]
    if not isinstance(data, list):
        raise LoaderError(f"{source}: expected a list of records (or {{'tasks': [...]}})")
    return [r if isinstance(r, dict) else {"_invalid": r} for r in data]


def _from_disk(path: Path) -> list[dict[str, Any]]:
    try:
        import datasets  # optional: only for saved datasets
    except ImportError:
        raise LoaderError(f"{path}: a dataset directory needs the `datasets` package") from None
    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        return [
            {"split": split if split in SPLITS else "train", **row}
            for split, part in loaded.items()
            for row in part
        ]
    return [dict(row) for row in loaded]


def _split(record: Mapping[str, Any], position: int) -> str:
    split = record.get("split")
    if isinstance(split, str) and split in SPLITS:
        return split
    return "test" if position % 5 == 4 else "train"


def _tool_call(value: Any, default: str) -> ToolCallSpec | None:
    if value is None:
        return None
    if isinstance(value, list):  # HUD allows a list of calls; one is what we run
        if len(value) != 1:
            raise ValueError(f"{default}_tool: exactly one call is supported")
        value = value[0]
    if isinstance(value, str):
        return ToolCallSpec(value)
    if not isinstance(value, dict) or not isinstance(value.get("name", default), str):
        raise ValueError(f"{default}_tool must be a name or {{name, arguments}}")
    arguments = value.get("arguments") or {}
    if not isinstance(arguments, dict):
        raise ValueError(f"{default}_tool.arguments must be an object")
    return ToolCallSpec(value.get("name", default), arguments)


def _hud_scenario(record: dict[str, Any], position: int) -> Scenario:
    prompt, config = record.get("prompt"), record.get("mcp_config")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("no prompt")
    config = check_mcp_config(config)
    evaluate = _tool_call(record.get("evaluate_tool", "evaluate"), "evaluate")
    assert evaluate is not None
    system = record.get("system_prompt")
    return Scenario(
        id=str(record.get("id") or f"task-{position:04d}"),
        split=_split(record, position),
        title=prompt.strip().splitlines()[0][:80],
        instruction=prompt.strip(),
        system=system if isinstance(system, str) else "",
        mcp=McpTask(config, evaluate, _tool_call(record.get("setup_tool"), "setup")),
    )


def _prompt_scenario(record: dict[str, Any], position: int) -> Scenario:
    prompt = record.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("no prompt")
    answer, system = record.get("answer", ""), record.get("system", "")
    if not isinstance(answer, str | int | float) or isinstance(answer, bool):
        raise ValueError("answer must be text or a number")
    return Scenario(
        id=str(record.get("id") or f"prompt-{position:04d}"),
        split=_split(record, position),
        title=prompt.strip().splitlines()[0][:80],
        instruction=prompt.strip(),
        system=system if isinstance(system, str) else "",
        answer=str(answer),
        difficulty=str(record.get("difficulty") or ""),
    )


def collect_scenarios(
    records: Iterable[R],
    make: Callable[[R, int], Scenario],
    skip: type[Exception] = ValueError,
) -> tuple[list[Scenario], dict[str, int]]:
    """The scenarios `make` builds from `records`, in order; a record it refuses with
    `skip` (the message is the reason) or a repeated id is counted by reason instead."""
    scenarios: list[Scenario] = []
    skipped: Counter[str] = Counter()
    seen: set[str] = set()
    for position, record in enumerate(records):
        try:
            scenario = make(record, position)
        except skip as exc:
            skipped[str(exc)] += 1
            continue
        if scenario.id in seen:
            skipped["duplicate id"] += 1
            continue
        seen.add(scenario.id)
        scenarios.append(scenario)
    return scenarios, dict(skipped)


def load_hud(source: str, *, name: str = "") -> Environment:
    scenarios, skipped = collect_scenarios(read_records(source), _hud_scenario)
    return Environment(
        name or f"hud:{source}",
        f"HUD-style MCP taskset from {source}",
        scenarios,
        agent="mcp",
        skipped=skipped,
    )


def load_jsonl(source: str, *, name: str = "") -> Environment:
    scenarios, skipped = collect_scenarios(read_records(source), _prompt_scenario)
    return Environment(
        name or f"jsonl:{source}",
        f"single-turn prompts from {source}",
        scenarios,
        agent="single",
        skipped=skipped,
    )
