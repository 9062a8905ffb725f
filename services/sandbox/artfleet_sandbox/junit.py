"""JUnit XML (as pytest writes it with --junitxml) → per-test results."""

from __future__ import annotations

import contextlib
import os
import xml.etree.ElementTree as ET

from artfleet_sandbox.backend import CaseResult, Outcome, SandboxError
from artfleet_sandbox.paths import read_file

MAX_MESSAGE_CHARS = 2000
MAX_REPORT_BYTES = 32 * 1024 * 1024

# A test can carry several result elements (a failure in the call and an error in its
# teardown); the first one in this order names its outcome.
_PRECEDENCE: tuple[tuple[str, Outcome], ...] = (
    ("failure", "failed"),
    ("error", "errored"),
    ("skipped", "skipped"),
)


def _message(element: ET.Element) -> str:
    text = element.get("message") or (element.text or "").strip()
    return text[:MAX_MESSAGE_CHARS]


def _duration(raw: str | None) -> float:
    try:
        return max(0.0, float(raw or 0.0))
    except ValueError:
        return 0.0


def _case(testcase: ET.Element) -> CaseResult:
    name = testcase.get("name", "")
    classname = testcase.get("classname", "")
    full_name = f"{classname}::{name}" if classname else name
    outcome: Outcome = "passed"
    message = ""
    for tag, tag_outcome in _PRECEDENCE:
        element = testcase.find(tag)
        if element is not None:
            outcome, message = tag_outcome, _message(element)
            break
    return CaseResult(
        name=full_name,
        outcome=outcome,
        duration_s=_duration(testcase.get("time")),
        message=message,
    )


def parse_junit(data: bytes) -> list[CaseResult]:
    """Every <testcase> in the document; an unreadable document yields no results.

    The XML comes from code under test, so it is untrusted: the caller caps its size,
    and expat (>= 2.4.1, bundled with CPython) refuses entity-expansion bombs.
    """
    try:
        root = ET.fromstring(data)
    except ET.ParseError:
        return []
    return [_case(testcase) for testcase in root.iter("testcase")]


def collect_report(reports_dir: str, name: str) -> list[CaseResult]:
    """Parse and remove the report `name` in `reports_dir`; [] when there is none."""
    # read_file refuses symlinks and non-files: the command under test could plant a
    # link to a host file here, and the server must not read that on its behalf.
    try:
        data, truncated = read_file(reports_dir, name, MAX_REPORT_BYTES)
    except (SandboxError, OSError):
        return []  # not pytest, or killed before it wrote the report
    finally:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(reports_dir, name))
    return [] if truncated else parse_junit(data)
