"""JUnit XML (as pytest writes it with --junitxml) → per-test results."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from artfleet_sandbox.backend import CaseResult, Outcome

MAX_MESSAGE_CHARS = 2000

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
