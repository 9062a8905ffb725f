"""Failed episodes as they travel (`RolloutException` in a group's result and its step
batch entry): one way to count them and to say what failed where, for the rollout's log,
the trainer's step summary and job error, and the CLI.

The rollout records each with the user's last frames ("path:line in function", innermost
last) and the request id of the run's log lines (`artfleet_rollout.failures`); one that
stands for a group that could not run counts for each of its episodes (`episodes`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from artfleet.v1 import common_pb2 as pb

MESSAGE_CHARS = 500  # a message in a line of text: its start


def episodes(failure: pb.RolloutException) -> int:
    """The episodes the failure ended (0 on the wire means one)."""
    return max(failure.episodes, 1)


def count(failures: Iterable[pb.RolloutException]) -> Counter[str]:
    """Failed episodes by exception type."""
    counts: Counter[str] = Counter()
    for failure in failures:
        counts[failure.type or "(unknown)"] += episodes(failure)
    return counts


def breakdown(counts: Counter[str]) -> str:
    """ "6 AssertionError, 1 KeyError" (most first, then by name)."""
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{n} {kind}" for kind, n in ordered)


def where(failure: pb.RolloutException) -> str:
    """ "at a.py:3 in f < b.py:9 in g" (innermost first), or "" without frames."""
    return "at " + " < ".join(reversed(failure.frames)) if failure.frames else ""


def describe(failure: pb.RolloutException) -> str:
    """ "Type: message at path:line in function < ..." on one line (an empty message,
    as a bare `assert` leaves, shows the type alone)."""
    message = " ".join(failure.message.split())[:MESSAGE_CHARS]
    text = f"{failure.type}: {message}" if message else failure.type
    at = where(failure)
    return f"{text} {at}" if at else text
