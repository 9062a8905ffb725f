"""Loaders anyone can point a job at: `hud:<path>` and `jsonl:<path>`.

- `hud:` a HUD taskset: a JSON list (or `{"tasks": [...]}`) or JSONL of
  task configs `{id?, prompt, mcp_config, setup_tool?, evaluate_tool, split?,
  system_prompt?, tool_choice?}`; the MCP agent runs them (`tool_choice`, OpenAI's:
  `auto`, `required`, `none` or `{type: function, function: {name}}`, is sent with every
  turn of that task, as the bundled tool environments send `required`).
- `jsonl:` prompts for the single-turn agent: `{prompt, answer?, system?, id?, split?,
  difficulty?}` per line.

Either reads a local file, or a `datasets` dataset saved on disk (`save_to_disk`: a
directory), at load time only. A record without a split goes to `test` when its position
is 4 mod 5 (the fifth, tenth, ...), to `train` otherwise, so a file of five or more has
both splits. A record that cannot become a task (not JSON, not UTF-8, a missing or invalid
field, a repeated id) is a bad record, named by its line (`Environment.bad_records`,
artfleet.contracts.records), never a crash; the trainer refuses a job over such a file
unless the job sets `skip_bad_records`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from artfleet.contracts.records import (
    BadRecord,
    BadRecords,
    DataFileError,
    numbered,
    read_json_records,
)
from artfleet.specs.hud_config import check_mcp_config

from .base import SPLITS, Environment, McpTask, Scenario, ToolCallSpec

# The source cannot be read at all (missing file, a broken JSON array): INVALID_ARGUMENT
# (artfleet.contracts.errors) naming the file, wherever it is raised.
LoaderError = DataFileError
Located = tuple[str, Any]  # (where, a record or a BadRecord): artfleet.contracts.records


def read_records(source: str) -> Iterator[Located]:
    """The located records of a JSON/JSONL file or a `datasets` directory (save_to_disk)."""
    path = Path(source).expanduser()
    if path.is_dir():
        return numbered(source, _from_disk(path))
    if not path.is_file():
        raise LoaderError(f"{source}: no such file or dataset directory")
    return read_json_records(path)


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


TOOL_CHOICES = ("auto", "required", "none")


def _tool_choice(value: Any) -> Any:
    """OpenAI's tool_choice, checked here so a bad one is a bad record, not a 400 later."""
    if value is None or value in TOOL_CHOICES:
        return value
    named = isinstance(value, dict) and value.get("type") == "function"
    function = value.get("function") if named else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not name:
        raise ValueError(
            f"tool_choice must be one of {', '.join(TOOL_CHOICES)} "
            "or {type: function, function: {name}}"
        )
    return {"type": "function", "function": {"name": name}}


def _prompt(record: dict[str, Any]) -> str:
    prompt = record.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("no prompt")
    return prompt.strip()


def _prompted(
    record: dict[str, Any], position: int, id_prefix: str, prompt: str, system: Any, **more: Any
) -> Scenario:
    """A scenario whose instruction is the record's prompt, titled by its first line."""
    return Scenario(
        id=str(record.get("id") or f"{id_prefix}-{position:04d}"),
        split=_split(record, position),
        title=prompt.splitlines()[0][:80],
        instruction=prompt,
        system=system if isinstance(system, str) else "",
        **more,
    )


def _hud_scenario(record: dict[str, Any], position: int) -> Scenario:
    prompt = _prompt(record)
    config = check_mcp_config(record.get("mcp_config"))
    evaluate = _tool_call(record.get("evaluate_tool", "evaluate"), "evaluate")
    assert evaluate is not None
    return _prompted(
        record,
        position,
        "task",
        prompt,
        record.get("system_prompt"),
        mcp=McpTask(config, evaluate, _tool_call(record.get("setup_tool"), "setup")),
        tool_choice=_tool_choice(record.get("tool_choice")),
    )


def _prompt_scenario(record: dict[str, Any], position: int) -> Scenario:
    prompt = _prompt(record)
    answer, system = record.get("answer", ""), record.get("system", "")
    if not isinstance(answer, str | int | float) or isinstance(answer, bool):
        raise ValueError("answer must be text or a number")
    return _prompted(
        record,
        position,
        "prompt",
        prompt,
        system,
        answer=str(answer),
        difficulty=str(record.get("difficulty") or ""),
    )


def collect_scenarios(
    records: Iterable[Located],
    make: Callable[[Any, int], Scenario],
    skip: type[Exception] = ValueError,
) -> tuple[list[Scenario], BadRecords]:
    """The scenarios `make` builds from located `records`, in order. A BadRecord, a record
    `make` refuses with `skip` (the message is the reason) and a repeated id are bad
    records at their location instead."""
    scenarios: list[Scenario] = []
    bad = BadRecords()
    seen: dict[str, str] = {}  # id -> where it first was
    for position, (where, record) in enumerate(records):
        if isinstance(record, BadRecord):
            bad.add(record)
            continue
        try:
            scenario = make(record, position)
        except skip as exc:
            bad.add(BadRecord(where, str(exc)))
            continue
        if scenario.id in seen:
            bad.add(
                BadRecord(where, "duplicate id", f"{scenario.id!r}, first at {seen[scenario.id]}")
            )
            continue
        seen[scenario.id] = where
        scenarios.append(scenario)
    return scenarios, bad


def records_environment(
    records: Iterable[Located],
    make: Callable[[Any, int], Scenario],
    name: str,
    description: str,
    *,
    agent: str = "terminal",
    skip: type[Exception] = ValueError,
) -> Environment:
    """The environment of the scenarios `make` builds from located `records`; the bad
    ones are kept on it (collect_scenarios)."""
    scenarios, bad = collect_scenarios(records, make, skip)
    return Environment(name, description, scenarios, agent=agent, bad_records=bad)


def load_hud(source: str, *, name: str = "") -> Environment:
    return records_environment(
        read_records(source),
        _hud_scenario,
        name or f"hud:{source}",
        f"HUD-style MCP taskset from {source}",
        agent="mcp",
    )


def load_jsonl(source: str, *, name: str = "") -> Environment:
    return records_environment(
        read_records(source),
        _prompt_scenario,
        name or f"jsonl:{source}",
        f"single-turn prompts from {source}",
        agent="single",
    )
