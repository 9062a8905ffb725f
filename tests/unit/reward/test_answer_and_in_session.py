"""answer_check (exact, numeric with tolerance, regex) and mcp_evaluate's in-session path."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from artfleet.contracts import codec
from artfleet.contracts.art_types import art
from artfleet.specs.scorer_params import AnswerCheckParams, McpEvaluateParams
from artfleet.v1 import common_pb2 as pb
from artfleet_reward.metrics import RewardMetrics
from artfleet_reward.scorers.answer import AnswerCheckScorer, check, numbers
from artfleet_reward.scorers.base import GroupContext, Runtime, Scored, ScorerError
from artfleet_reward.scorers.mcp import MCPEvaluateScorer, parse_options
from artfleet_reward.settings import RewardSettings


@pytest.mark.parametrize(
    ("reply", "expected", "params", "passed"),
    [
        ("To add 6 and 8: 6 + 8 = 14", "14", {}, True),
        ("14 is wrong, it is 15", "14", {}, False),
        ("14 is wrong, it is 15", "14", {"pick": "any"}, True),
        ("The total is 1,024.", "1024", {}, True),
        ("about 3.14159", "3.14", {"tolerance": 0.01}, True),
        ("about 3.2", "3.14", {"tolerance": 0.01}, False),
        ("105", "100", {"relative_tolerance": 0.05}, True),
        ("-7", "-7", {}, True),
        ("no number", "3", {}, False),
        ("  Paris. ", "paris", {"mode": "exact"}, True),
        ("Paris", "paris", {"mode": "exact", "case_sensitive": True}, False),
        ("the capital is Paris!", "Paris", {"mode": "regex"}, True),
        ("answer: B", "", {"mode": "regex", "pattern": r"answer:\s*[AB]"}, True),
    ],
)
def test_answer_check_rules(
    reply: str, expected: str, params: dict[str, Any], passed: bool
) -> None:
    assert check(reply, expected, AnswerCheckParams.model_validate(params)) is passed


def test_numbers_reads_signs_decimals_and_thousands() -> None:
    assert numbers("-3, 1,000 and .5 then 2.25") == [-3.0, 1000.0, 0.5, 2.25]


def _ctx(replies: list[str], episodes: list[pb.Episode]) -> GroupContext:
    trajectories = [
        codec.trajectory_to_proto(
            art.Trajectory(
                messages_and_choices=[
                    {"role": "user", "content": "q"},
                    {"role": "assistant", "content": r},
                ],
                reward=0.0,
            )
        )
        for r in replies
    ]
    runtime = Runtime(RewardSettings(api_token="t"), RewardMetrics(CollectorRegistry()))  # type: ignore[arg-type]
    return GroupContext(trajectories, episodes, None, runtime)


async def test_answer_check_scores_with_the_episode_s_answer() -> None:
    ctx = _ctx(
        ["It is 12.", "It is 13.", "It is 12."],
        [pb.Episode(expected_answer="12"), pb.Episode(expected_answer="12"), pb.Episode()],
    )
    results = await AnswerCheckScorer(AnswerCheckParams()).score(ctx, [0, 1, 2])
    assert isinstance(results[0], Scored) and results[0].value == 1.0
    assert isinstance(results[1], Scored) and results[1].value == 0.0
    assert isinstance(results[2], ScorerError) and "no expected answer" in results[2].message
    fixed = await AnswerCheckScorer(AnswerCheckParams(answer="12")).score(ctx, [2])
    assert isinstance(fixed[0], Scored) and fixed[0].value == 1.0


async def test_mcp_evaluate_uses_the_in_session_result_without_a_server() -> None:
    scorer = MCPEvaluateScorer(parse_options(McpEvaluateParams()))
    evaluated = pb.Episode(evaluated=True, evaluate_reward=0.4, evaluate_done=False)
    ctx = _ctx(["a", "b"], [evaluated, pb.Episode()])
    results = await scorer.score(ctx, [0, 1])
    assert isinstance(results[0], Scored) and results[0].value == 0.4
    assert results[0].metrics == {"mcp_in_session": 1.0, "mcp_done": 0.0}
    # An episode from elsewhere, and no server to replay it on: a scorer error.
    assert isinstance(results[1], ScorerError) and "no server" in results[1].message


def test_task_check_is_numeric_for_a_number_and_exact_otherwise() -> None:
    from artfleet.specs.answers import task_check

    assert task_check("so 8 + 3 = 11.", "11")
    assert not task_check("11, no wait, 12", "11")
    assert task_check(" Paris.", "paris")
    assert not task_check("It is Paris", "Paris")
