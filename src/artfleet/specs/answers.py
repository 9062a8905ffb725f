"""The answer check of single-turn tasks, shared by the reward service's `answer_check`
scorer and the rollout's `single` agent (which records it as the episode's task check, so
evaluations count a correct answer as a success whatever reward a job trains with).

Modes: `exact` (trimmed, case-folded, a final period dropped), `numeric` (a number in the
reply within tolerance; commas in thousands allowed) and `regex` (a search).
"""

from __future__ import annotations

import math
import re

from artfleet.specs.scorer_params import AnswerCheckParams

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def numbers(text: str) -> list[float]:
    found = []
    for match in _NUMBER.findall(text):
        try:
            found.append(float(match.replace(",", "")))
        except ValueError:
            continue
    return found


def _normal(text: str, case_sensitive: bool) -> str:
    text = text.strip().rstrip(".").strip()
    return text if case_sensitive else text.casefold()


def check(reply: str, expected: str, params: AnswerCheckParams) -> bool:
    if params.mode == "exact":
        return _normal(reply, params.case_sensitive) == _normal(expected, params.case_sensitive)
    if params.mode == "regex":
        pattern = params.pattern or re.escape(expected.strip())
        flags = 0 if params.case_sensitive else re.IGNORECASE
        return re.search(pattern, reply, flags) is not None
    target = numbers(expected)
    if len(target) != 1:
        raise ValueError(f"expected answer {expected[:80]!r} is not one number")
    found = numbers(reply)
    picked = found if params.pick == "any" else found[-1:] if params.pick == "last" else found[:1]
    return any(
        math.isclose(value, target[0], rel_tol=params.relative_tolerance, abs_tol=params.tolerance)
        for value in picked
    )


def task_check(reply: str, expected: str) -> bool:
    """A scenario's own check with the scorer's defaults: numeric (the last number in the
    reply) when the expected answer is one number, else exact."""
    numeric = len(numbers(expected)) == 1 and _NUMBER.fullmatch(expected.strip()) is not None
    return check(reply, expected, AnswerCheckParams(mode="numeric" if numeric else "exact"))
