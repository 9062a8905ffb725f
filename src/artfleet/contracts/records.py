"""Data files read record by record, each bad record named by where it is.

The files a job points at (JSONL environments, SWE-bench / R2E-Gym / SWE-SYNTH records,
SFT samples) are read here. JSON lines are read one by one and located `path:line`; a whole
JSON document (an array, `{"tasks": [...]}` or one object) has its records numbered,
`path record n`. A line that is not UTF-8, not JSON or not an object becomes a `BadRecord`
in its place, so one broken line never hides the others; loaders add their own (a missing
or invalid field) at the same locations. A file that cannot be read at all is a
`DataFileError` (INVALID_ARGUMENT), never an internal error.

A job refuses a file with bad records unless it sets `skip_bad_records`
(`refuse_bad_records`). Between services (the rollout's `EnvironmentInfo.skipped`) they
travel as a map (`BadRecords.as_skipped`): the first MAX_SHOWN keyed by
`location: reason`, each counted 1, the rest counted by reason; the trainer reads the map
back (`BadRecords.from_skipped`) to name them.
"""

from __future__ import annotations

import codecs
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from artfleet.contracts.errors import InvalidArgument

MAX_SHOWN = 5  # bad records named in a refusal; the rest are counted
JSON_LINES_SUFFIXES = (".jsonl", ".ndjson")
SKIP_FIELD = "skip_bad_records"  # the job spec key that skips them
_LOCATED = re.compile(r"^(?P<where>.+?(?::\d+| record \d+)): (?P<reason>.+)$", re.S)
_POSITION = re.compile(r"^(?P<path>.*?)(?::| record )(?P<n>\d+)$", re.S)


class DataFileError(InvalidArgument, ValueError):
    """The file cannot be read at all (missing, unreadable, a broken JSON array); the
    message starts with the file (and line, where one is known)."""


@dataclass(frozen=True)
class BadRecord:
    """One record left out: where it is, the reason it is counted under, and specifics."""

    where: str
    reason: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}" + (f" ({self.detail})" if self.detail else "")


@dataclass
class BadRecords:
    """A file's bad records: how many, by reason, and the first few in file order."""

    count: int = 0
    by_reason: Counter[str] = field(default_factory=Counter)
    first: list[BadRecord] = field(default_factory=list)

    def add(self, bad: BadRecord) -> None:
        self.count += 1
        self.by_reason[bad.reason] += 1
        if len(self.first) < MAX_SHOWN:
            self.first.append(bad)

    def summary(self) -> str:
        """`2 bad records: a.jsonl:3: not valid JSON (...); a.jsonl:7: no prompt`."""
        noun = "record" if self.count == 1 else "records"
        text = f"{self.count} bad {noun}: " + "; ".join(map(str, self.first))
        more = self.count - len(self.first)
        return text + (f"; and {more} more" if more > 0 else "")

    def as_skipped(self) -> dict[str, int]:
        """The map EnvironmentInfo.skipped carries: the first few by location, the rest
        by reason (the counts add up to `count`)."""
        rest = Counter(self.by_reason)
        rest.subtract(bad.reason for bad in self.first)
        located = {str(bad): 1 for bad in self.first}
        return located | {reason: n for reason, n in sorted(rest.items()) if n > 0}

    @classmethod
    def from_skipped(cls, skipped: Mapping[str, int]) -> BadRecords:
        """The bad records a `skipped` map describes (as_skipped's form)."""
        bad = cls(count=sum(skipped.values()))
        for key, n in skipped.items():
            match = _LOCATED.match(key)
            if match is None:
                bad.by_reason[key] += n
                continue
            bad.by_reason[match["reason"]] += n
            bad.first.append(BadRecord(match["where"], match["reason"]))
        bad.first.sort(key=lambda b: _position(b.where))
        return bad


def _position(where: str) -> tuple[str, int]:
    match = _POSITION.match(where)
    return (match["path"], int(match["n"])) if match else (where, 0)


def refuse_bad_records(bad: BadRecords, skip: bool, field_name: str) -> None:
    """InvalidArgument naming `field_name` and the first bad records, unless the job skips
    them (`skip_bad_records`)."""
    if bad.count and not skip:
        raise InvalidArgument(
            f"{bad.summary()}; fix them, or set {SKIP_FIELD}: true to leave them out",
            field_name,
        )


# ---------------------------------------------------------------- reading


def read_json_records(path: str | Path) -> Iterator[tuple[str, Any]]:
    """(location, record) for each record of a JSON-lines or JSON file; a record that is
    not UTF-8, not JSON or not an object is a BadRecord. `.jsonl`/`.ndjson` files are JSON
    lines; other files are one JSON document when they parse as one (an array must),
    else JSON lines."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    data = data.removeprefix(codecs.BOM_UTF8)
    if path.suffix in JSON_LINES_SUFFIXES:
        yield from _json_lines(path, data)
        return
    if data.lstrip().startswith(b"["):
        # An array is one document: a broken one fails whole, at its line.
        yield from numbered(path, _document(path, data))
        return
    try:
        whole = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):  # not one document: JSON lines by another name
        yield from _json_lines(path, data)
        return
    if isinstance(whole, dict) and isinstance(whole.get("tasks"), list):
        whole = whole["tasks"]  # HUD's {"tasks": [...]}
    yield from numbered(path, whole if isinstance(whole, list) else [whole])


def numbered(path: str | Path, rows: Iterable[Any]) -> Iterator[tuple[str, Any]]:
    """Records without lines (an array, a parquet table, a saved dataset): `path record n`."""
    for number, row in enumerate(rows, 1):
        where = f"{path} record {number}"
        yield where, row if isinstance(row, dict) else BadRecord(where, "not a JSON object")


def _document(path: Path, data: bytes) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DataFileError(f"{path}:{line}: not UTF-8 ({exc.reason})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataFileError(
            f"{path}:{exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno})"
        ) from None
    except (ValueError, RecursionError) as exc:  # nested too deep, integers too long
        raise DataFileError(f"{path}: not valid JSON ({exc})") from None


def _json_lines(path: Path, data: bytes) -> Iterator[tuple[str, Any]]:
    # Split on b"\n" only: str.splitlines() also breaks at U+2028 and other separators
    # JSON strings may hold, and then the line numbers would not be the editor's.
    for number, raw in enumerate(data.split(b"\n"), 1):
        where = f"{path}:{number}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            detail = f"{exc.reason} at byte {exc.start + 1} of the line"
            yield where, BadRecord(where, "not UTF-8", detail)
            continue
        if line.strip():
            yield where, _parse_line(where, line)


def _parse_line(where: str, line: str) -> Any:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        return BadRecord(where, "not valid JSON", f"{exc.msg} at column {exc.colno}")
    except RecursionError:
        return BadRecord(where, "not valid JSON", "nested too deeply")
    except ValueError as exc:  # an integer longer than Python converts
        return BadRecord(where, "not valid JSON", str(exc))
    return value if isinstance(value, dict) else BadRecord(where, "not a JSON object")
