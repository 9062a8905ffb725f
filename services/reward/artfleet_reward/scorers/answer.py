"""`answer_check`: a single-turn task's answer against the expected one (the HTTP training API's
math example).

The expected answer travels with the episode (`Episode.expected_answer`, set by the rollout
from the scenario) unless the params fix one. Modes: `exact` (trimmed, case-folded, a final
period dropped), `numeric` (a number in the reply within tolerance; commas in thousands
allowed) and `regex` (a search). The reply is the last assistant message. The check itself
lives in `artfleet.specs.answers` (the rollout records it as a single-turn episode's task check).
"""

from __future__ import annotations

from collections.abc import Sequence

from artfleet.contracts import codec
from artfleet.specs.answers import check, numbers
from artfleet.specs.scorer_params import ANSWER_CHECK, AnswerCheckParams

from .base import ERROR, GroupContext, Result, Scored, Scorer, ScorerError, builtin

__all__ = ["ANSWER_SCORERS", "AnswerCheckScorer", "check", "numbers"]


class AnswerCheckScorer(Scorer):
    name = ANSWER_CHECK

    def __init__(self, params: AnswerCheckParams) -> None:
        self.params = params

    async def score(self, ctx: GroupContext, indices: Sequence[int]) -> list[Result]:
        return [self._one(ctx, i) for i in indices]

    def _one(self, ctx: GroupContext, i: int) -> Result:
        expected = self.params.answer
        if expected is None:
            expected = ctx.episodes[i].expected_answer if i < len(ctx.episodes) else ""
        if not expected:
            return ScorerError(ERROR, "no expected answer: the scenario has none (set `answer`)")
        reply = _last_reply(codec.trajectory_from_proto(ctx.trajectories[i]).messages())
        try:
            passed = check(reply, expected, self.params)
        except ValueError as exc:
            return ScorerError(ERROR, str(exc))
        return Scored(float(passed), (f"answer_check: expected {expected[:80]!r}: {passed}",))


def _last_reply(messages: Sequence[object]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "assistant":
            content = message.get("content")
            return content if isinstance(content, str) else ""
    return ""


def _configure(params: AnswerCheckParams, field: str) -> Scorer:
    return AnswerCheckScorer(params)


ANSWER_SCORERS = (
    builtin(
        ANSWER_CHECK,
        "single-turn answer check: exact, numeric with tolerance, or regex",
        _configure,
    ),
)
