"""Data files fail by their line: the shared record reader (artfleet.contracts.records)
names every bad record `file:line: reason`, the loaders built on it (JSONL environments,
repo tasks, SFT samples) keep the good records and locate the bad ones, and a job refuses
them unless it sets `skip_bad_records`."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest
from repo_paths import FIXTURES

from artfleet.contracts.errors import InvalidArgument
from artfleet.contracts.records import (
    BadRecord,
    BadRecords,
    DataFileError,
    read_json_records,
    refuse_bad_records,
)
from artfleet.specs.job import validate_spec
from artfleet.specs.sft import SftModel
from artfleet.v1 import common_pb2 as pb
from artfleet_cli import render
from artfleet_rollout.environments import get_environment, registry
from artfleet_rollout.environments.loaders import load_jsonl
from artfleet_rollout.environments.repo_loaders import load_swebench
from artfleet_trainer.sft import phase as sft_phase
from artfleet_trainer.sft.data import load_samples

PROMPTS = ['{"prompt": "one"}', '{"prompt": "two"}', '{"prompt": "three",}', '{"prompt": "4"}']


def _bad(records: list[tuple[str, object]]) -> list[str]:
    return [str(r) for _, r in records if isinstance(r, BadRecord)]


def test_bad_json_on_line_3_of_4_names_line_3(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(PROMPTS) + "\n")
    records = list(read_json_records(path))
    assert [where for where, _ in records] == [f"{path}:{n}" for n in (1, 2, 3, 4)]
    assert _bad(records) == [
        f"{path}:3: not valid JSON (Expecting property name enclosed in double quotes at column 20)"
    ]
    assert records[3][1] == {"prompt": "4"}  # the lines after it are read too


def test_bad_utf8_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"prompt": "a"}\n\n{"prompt": "caf\xe9"}\n[1]\n')
    records = list(read_json_records(path))
    assert _bad(records) == [
        f"{path}:3: not UTF-8 (invalid continuation byte at byte 16 of the line)",
        f"{path}:4: not a JSON object",
    ]
    # A JSON array is one document: bad bytes in it fail the file, at their line.
    array = tmp_path / "tasks.json"
    array.write_bytes(b'[{"prompt": "a"},\n {"prompt": "\xff"}]')
    with pytest.raises(DataFileError, match=rf"^{array}:2: not UTF-8") as info:
        list(read_json_records(array))
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT  # never INTERNAL


def test_line_numbers_are_the_editors_despite_unicode_separators(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    # U+2028 inside a JSON string is valid JSON; str.splitlines() would break there.
    path.write_text('{"prompt": "a\u2028b"}\n{"prompt": }\n', encoding="utf-8")
    records = list(read_json_records(path))
    assert records[0][1] == {"prompt": "a\u2028b"}
    assert [where for where, _ in records] == [f"{path}:1", f"{path}:2"]


def test_a_jsonl_environment_keeps_good_records_and_locates_missing_fields(
    tmp_path: Path,
) -> None:
    path = tmp_path / "p.jsonl"
    lines = [
        *PROMPTS,
        '{"answer": 5}',
        '{"prompt": "dup", "id": "x"}',
        '{"prompt": "d", "id": "x"}',
    ]
    path.write_text("\n".join(lines))
    env = load_jsonl(str(path))
    assert [s.instruction for s in env.scenarios()] == ["one", "two", "4", "dup"]
    bad = env.bad_records
    assert bad.count == 3 and env.skipped == {
        "not valid JSON": 1,
        "no prompt": 1,
        "duplicate id": 1,
    }
    assert [str(b) for b in bad.first][1:] == [
        f"{path}:5: no prompt",
        f"{path}:7: duplicate id ('x', first at {path}:6)",
    ]


def test_repo_records_are_located_by_line() -> None:
    fixture = FIXTURES / "repo_tasks" / "swebench.jsonl"
    env = load_swebench(str(fixture))
    assert [b.where for b in env.bad_records.first] == [f"{fixture}:{n}" for n in range(3, 8)]
    assert env.bad_records.count == 6


def test_the_skipped_map_carries_the_first_five_by_location(tmp_path: Path) -> None:
    bad = BadRecords()
    for line in (12, 3, 40, 7, 9, 100, 101):
        bad.add(BadRecord(f"{tmp_path}/p.jsonl:{line}", "no prompt"))
    skipped = bad.as_skipped()
    assert sum(skipped.values()) == 7 and skipped["no prompt"] == 2
    back = BadRecords.from_skipped(skipped)
    assert back.count == 7
    # Read back in line order (a proto map has none), numbers compared as numbers.
    assert [b.where.rsplit(":", 1)[1] for b in back.first] == ["3", "7", "9", "12", "40"]
    assert back.summary().endswith("; and 2 more")


def test_a_job_refuses_bad_records_unless_it_skips_them(tmp_path: Path) -> None:
    bad = BadRecords()
    bad.add(BadRecord(f"{tmp_path}/p.jsonl:3", "not valid JSON", "Expecting ',' delimiter"))
    with pytest.raises(InvalidArgument) as info:
        refuse_bad_records(bad, False, "environment")
    assert info.value.field == "environment"
    assert str(info.value) == (
        f"environment: 1 bad record: {tmp_path}/p.jsonl:3: not valid JSON (Expecting ',' "
        "delimiter); fix them, or set skip_bad_records: true to leave them out"
    )
    refuse_bad_records(bad, True, "environment")  # skipped: no error
    refuse_bad_records(BadRecords(), False, "environment")  # none: no error


def test_sft_samples_with_bad_records_are_refused_at_submit_unless_skipped(
    tmp_path: Path,
) -> None:
    good = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    path = tmp_path / "sft.jsonl"
    path.write_text("\n".join([json.dumps(good), "{broken", json.dumps({"messages": "x"})]))
    spec = validate_spec({"sft": {"data_path": str(path)}})
    with pytest.raises(InvalidArgument) as info:
        sft_phase.check_spec(spec)
    assert info.value.field == "sft.data_path"
    assert f"2 bad records: {path}:2: not valid JSON" in str(info.value)
    assert f"{path}:3: empty conversation" in str(info.value)
    sft_phase.check_spec(spec.model_copy(update={"skip_bad_records": True}))
    data = load_samples(SftModel(data_path=str(path)), skip_bad_records=True)
    assert len(data.samples) == 1 and data.bad.count == 2
    assert data.skipped == {"not valid JSON": 1, "empty conversation": 1}


def test_a_fixed_file_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A job refused for its bad records is submitted again once the file is fixed: the
    # rollout must not answer from the environment it cached.
    monkeypatch.setattr(registry, "_LOADED", {})
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(PROMPTS))
    name = f"jsonl:{path}"
    first = get_environment(name)
    assert first.bad_records.count == 1 and get_environment(name) is first
    path.write_text("\n".join(p.replace(",}", "}") for p in PROMPTS))  # one byte shorter
    fixed = get_environment(name)
    assert fixed.bad_records.count == 0 and len(fixed.scenarios()) == 4


def test_jobs_watch_prints_what_a_job_left_out() -> None:
    note = "environment jsonl:p.jsonl: left out 1 bad record: p.jsonl:3: no prompt [x]"
    events = [
        pb.ProgressEvent(kind=pb.EVENT_KIND_LOG, message=note),
        pb.ProgressEvent(kind=pb.EVENT_KIND_STATE, state=pb.JOB_STATE_SUCCEEDED),
    ]
    with render.console.capture() as captured:
        render.follow(events, 1)
    assert note in captured.get()  # brackets and all: not rich markup
