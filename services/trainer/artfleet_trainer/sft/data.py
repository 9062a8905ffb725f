"""SFT samples from disk: the offline-sample format or OpenAI-messages JSONL.

Offline samples (the terminal agent's `data/convert_samples.py`): one record per episode,
`{"task_id", "score", "extra": {"conversation": [{"role", "content"}, ...], ...}}`, in a
JSON array or one per line; samples above a score are kept and the assistant turns of
`extra.conversation` are trained on. OpenAI messages: `{"messages": [...], "tools"?: [...]}`
per line (ART's own SFT files). `auto` reads each record by its keys.

A record that is not UTF-8, not JSON, not an object or lacks a field its format needs is
a bad record, named by its line (artfleet.contracts.records); with the job's
`skip_bad_records` it is left out and counted, else the job is refused naming it. Records
that are well formed but not trained on (below `min_score`, no assistant turn, over
`max_samples`) are counted by reason too. A file with no usable sample is an error at
submit. Pure Python: the servicer validates with it before the job is queued.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from artfleet.contracts.errors import InvalidArgument
from artfleet.contracts.records import (
    BadRecord,
    BadRecords,
    DataFileError,
    read_json_records,
    refuse_bad_records,
)
from artfleet.specs.sft import SftModel

ROLES = frozenset({"system", "user", "assistant", "tool"})
MAX_FILE_BYTES = 2 << 30  # refuse to read more than 2 GiB into memory


@dataclass(frozen=True)
class SftSample:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None


@dataclass
class SftData:
    samples: list[SftSample] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # bad records and filtered ones
    records: int = 0
    bad: BadRecords = field(default_factory=BadRecords)


class Skip(ValueError):
    """A bad record (malformed, a field missing); the message is its reason."""


class Filtered(ValueError):
    """A well-formed record not trained on; the message is the reason it is counted under."""


def load_samples(
    spec: SftModel, *, skip_bad_records: bool = True, field_name: str = "sft.data_path"
) -> SftData:
    """Every usable sample of `spec.data_path` (filtered by `min_score`, at most
    `max_samples`); InvalidArgument naming `field_name` when the file cannot be read, has
    bad records and `skip_bad_records` is False (the job's option), or holds no usable
    sample."""
    path = Path(spec.data_path)
    try:
        is_file = path.is_file()
        size = path.stat().st_size if is_file else 0
    except (OSError, ValueError) as exc:  # name too long, permission denied on a parent, ...
        raise InvalidArgument(f"cannot use {spec.data_path!r}: {exc}", field_name) from None
    if not is_file:
        raise InvalidArgument(f"no such file on the trainer: {spec.data_path}", field_name)
    if size > MAX_FILE_BYTES:
        raise InvalidArgument(f"file is larger than {MAX_FILE_BYTES} bytes", field_name)
    data = _read_samples(path, spec, field_name)
    refuse_bad_records(data.bad, skip_bad_records, field_name)
    samples, skipped = data.samples, Counter(data.skipped)
    if spec.max_samples and len(samples) > spec.max_samples:
        skipped["over max_samples"] += len(samples) - spec.max_samples
        samples = samples[: spec.max_samples]
    data = SftData(samples, dict(sorted(skipped.items())), data.records, data.bad)
    if not samples:
        raise InvalidArgument(
            f"no usable SFT sample in {spec.data_path}: {describe(data)}", field_name
        )
    return data


def _read_samples(path: Path, spec: SftModel, field_name: str) -> SftData:
    """Every sample of the file; bad records located, filtered ones counted by reason."""
    data = SftData()
    filtered: Counter[str] = Counter()
    for where, record in _records(path, field_name):
        data.records += 1
        if isinstance(record, BadRecord):
            data.bad.add(record)
            continue
        try:
            data.samples.append(_sample(record, spec))
        except Filtered as exc:
            filtered[str(exc)] += 1
        except Skip as exc:
            data.bad.add(BadRecord(where, str(exc)))
    data.skipped = dict(filtered + data.bad.by_reason)
    return data


def describe(data: SftData) -> str:
    reasons = ", ".join(f"{n} {reason}" for reason, n in data.skipped.items()) or "none skipped"
    text = f"{len(data.samples)} of {data.records} records kept ({reasons})"
    return text + (f"; {data.bad.summary()}" if data.bad.count else "")


def _records(path: Path, field_name: str) -> Iterator[tuple[str, Any]]:
    """Located records: a JSON array or one object when the file is one document,
    otherwise JSON lines (artfleet.contracts.records)."""
    try:
        yield from read_json_records(path)
    except DataFileError as exc:
        raise InvalidArgument(exc.message, field_name) from None


def _sample(record: Mapping[str, Any], spec: SftModel) -> SftSample:
    kind = spec.format
    if kind == "auto":
        kind = "messages" if "messages" in record else "offline"
    if spec.min_score is not None:
        score = record.get("score")
        if isinstance(score, bool) or not isinstance(score, int | float):
            raise Skip("no score")
        if score < spec.min_score:
            raise Filtered("score below min_score")
    if kind == "messages":
        raw, tools = record.get("messages"), record.get("tools")
        if raw is None:
            raise Skip("no messages")
    else:
        extra = record.get("extra")
        raw = extra.get("conversation") if isinstance(extra, Mapping) else None
        tools = None
        if raw is None:
            raise Skip("no extra.conversation")
    messages = _messages(raw)
    if tools is not None and not (
        isinstance(tools, list) and all(isinstance(t, Mapping) for t in tools)
    ):
        raise Skip("bad tools")
    return SftSample(messages, [dict(t) for t in tools] if tools else None)


def _messages(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise Skip("empty conversation")
    messages = [_message(m) for m in raw]
    if not any(m["role"] == "assistant" for m in messages):
        raise Filtered("no assistant turn")  # well formed, but nothing to learn from
    return messages


def _message(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, Mapping) or raw.get("role") not in ROLES:
        raise Skip("bad role")
    content = raw.get("content")
    tool_calls = raw.get("tool_calls")
    if content is None and raw["role"] == "assistant" and isinstance(tool_calls, list):
        content = ""
    if not isinstance(content, str):
        raise Skip("content is not text")
    message: dict[str, Any] = {"role": raw["role"], "content": content}
    if isinstance(tool_calls, list) and tool_calls:
        message["tool_calls"] = tool_calls
    if raw["role"] == "tool" and isinstance(raw.get("tool_call_id"), str):
        message["tool_call_id"] = raw["tool_call_id"]
    return message


def epoch_order(samples: list[SftSample], spec: SftModel, seed: int) -> list[SftSample]:
    """The phase's samples, epoch after epoch; each epoch shuffled by the job's seed."""
    out: list[SftSample] = []
    for epoch in range(spec.epochs):
        order = list(samples)
        if spec.shuffle:
            random.Random(f"{seed}:{epoch}").shuffle(order)
        out.extend(order)
    return out
