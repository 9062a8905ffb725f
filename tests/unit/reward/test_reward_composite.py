"""Composite rewards: weights, gates, clips, and every failure policy.

Failures come from real scorers: a custom episode scorer that raises on some episodes
(as a buggy plugin would), and a judge whose endpoint refuses connections.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
from plugin_dist import install_plugin
from prometheus_client import CollectorRegistry

from artfleet.specs.reward import GateModel, RangeModel, ScorerModel
from artfleet.v1 import common_pb2 as pb
from artfleet_reward.composite import GROUP, score_group
from artfleet_reward.metrics import RewardMetrics
from artfleet_reward.scorers import registry
from artfleet_reward.scorers.base import EpisodeScorer, GroupContext, InvalidSpec, Runtime, Scorer
from artfleet_reward.scorers.llm import JudgeCache
from artfleet_reward.scorers.process import EPISODE_SCORERS
from artfleet_reward.settings import RewardSettings
from artfleet_reward.spec import Entry, ResolvedSpec, resolve_spec

SETTINGS = RewardSettings(api_token="unit-test-token")  # type: ignore[arg-type]


def _runtime() -> Runtime:
    return Runtime(SETTINGS, RewardMetrics(CollectorRegistry()), JudgeCache(16))


def _episodes() -> list[pb.Episode]:
    """0: all tests pass and the check passed; 1: half the tests; 2: nothing ran."""
    return [
        pb.Episode(tests=pb.TestSummary(passed=2, total=2), check_ran=True, check_passed=True),
        pb.Episode(tests=pb.TestSummary(passed=1, failed=1, total=2), check_ran=True),
        pb.Episode(finish="error"),
    ]


def _ctx(episodes: list[pb.Episode] | None = None) -> GroupContext:
    episodes = episodes if episodes is not None else _episodes()
    return GroupContext([pb.Trajectory() for _ in episodes], episodes, None, _runtime())


def entry(name: str, weight: float, scorer: Scorer, **spec: Any) -> Entry:
    """A spec's scorer (the shared model: gate, clip, on_error) with a scorer built here;
    unvalidated, since a built-in's name stands for an in-process scorer without params."""
    return Entry(ScorerModel.model_construct(name=name, weight=weight, **spec), scorer)


def _builtin(name: str, params: dict[str, Any] | None = None) -> Scorer:
    definition = next(d for d in EPISODE_SCORERS if d.name == name)
    return definition.build(params or {}, "params")


def _fragile(episode: pb.Episode) -> float:
    """A plugin with a bug: it cannot score episodes that ended in an error."""
    if episode.finish == "error":
        raise KeyError("finish")
    return 0.5


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_weighted_sum_of_components() -> None:
    spec = ResolvedSpec(
        [entry("tests", 2.0, _builtin("tests")), entry("task_check", -0.5, _builtin("task_check"))]
    )
    outcome = await score_group(spec, _ctx())
    assert [t.reward for t in outcome.trajectories] == [2.0 - 0.5, 2 * 0.25, 0.0]
    assert outcome.trajectories[1].components == {"tests": 0.25, "task_check": 0.0}
    assert not outcome.failures and not outcome.stopped


async def test_gate_limits_a_scorer_to_passing_trajectories() -> None:
    seen: list[list[int]] = []

    class Recorder(Scorer):
        async def score(self, ctx: GroupContext, indices: Any) -> list[Any]:
            seen.append(list(indices))
            return [0.8 for _ in indices]

    gated = entry("ruler", 1.0, Recorder(), gate=GateModel(scorer="tests", min=1.0))
    spec = ResolvedSpec([entry("tests", 1.0, _builtin("tests")), gated])
    outcome = await score_group(spec, _ctx())
    assert seen == [[0]]  # only the trajectory whose tests all pass is judged
    assert [t.components["ruler"] for t in outcome.trajectories] == [0.8, 0.0, 0.0]
    assert [t.reward for t in outcome.trajectories] == [1.8, 0.25, 0.0]


async def test_gate_threshold() -> None:
    gate = GateModel(scorer="tests", min=0.2)
    spec = ResolvedSpec(
        [
            entry("tests", 1.0, _builtin("tests")),
            entry("task_check", 1.0, _builtin("task_check"), gate=gate),
        ]
    )
    outcome = await score_group(spec, _ctx())
    assert [t.components["task_check"] for t in outcome.trajectories] == [1.0, 0.0, 0.0]


async def test_clip_per_scorer_and_total() -> None:
    process = _builtin("process", {"all_tests_pass": 5.0})
    spec = ResolvedSpec(
        [
            entry("process", 1.0, process, clip=RangeModel(max=2.0)),
            entry("tests", 3.0, _builtin("tests")),
        ],
        clip=RangeModel(min=-1.0, max=4.0),
    )
    outcome = await score_group(spec, _ctx())
    assert outcome.trajectories[0].components["process"] == 2.0  # 5.0 clipped
    assert outcome.trajectories[0].reward == 4.0  # 2 + 3 clipped to 4


@pytest.mark.parametrize("policy", ["zero", "drop_trajectory", "drop_group", "fail_job"])
async def test_failure_policies_of_a_per_trajectory_failure(policy: str) -> None:
    spec = ResolvedSpec(
        [
            entry("tests", 1.0, _builtin("tests")),
            entry("custom", 1.0, EpisodeScorer(_fragile), on_error=policy),
        ]
    )
    outcome = await score_group(spec, _ctx())
    [failure] = outcome.failures
    assert (failure.scorer, failure.type, failure.trajectory, failure.action) == (
        "custom",
        "error",
        2,
        policy,
    )
    assert "KeyError" in failure.message
    if policy == "zero":
        assert [t.reward for t in outcome.trajectories] == [1.5, 0.75, 0.0]
        assert not outcome.stopped
    elif policy == "drop_trajectory":
        assert [t.dropped for t in outcome.trajectories] == [False, False, True]
        assert [t.reward for t in outcome.trajectories[:2]] == [1.5, 0.75]
    elif policy == "drop_group":
        assert outcome.group_dropped and not outcome.fail_job
    else:
        assert outcome.fail_job.startswith("reward scorer 'custom' failed (error): KeyError")


async def test_a_dropped_trajectory_is_not_scored_again() -> None:
    calls: list[list[int]] = []

    class Recorder(Scorer):
        async def score(self, ctx: GroupContext, indices: Any) -> list[Any]:
            calls.append(list(indices))
            return [1.0 for _ in indices]

    spec = ResolvedSpec(
        [
            entry("custom", 1.0, EpisodeScorer(_fragile), on_error="drop_trajectory"),
            entry("judge", 1.0, Recorder()),
        ]
    )
    await score_group(spec, _ctx())
    assert calls == [[0, 1]]


async def test_an_unreachable_judge_is_one_group_failure() -> None:
    port = _closed_port()
    judge = {"base_url": f"http://127.0.0.1:{port}/v1", "model": "m"}
    params = json.dumps({"judge": judge, "timeout_s": 5})
    for policy, check in [
        ("drop_group", lambda o: o.group_dropped),
        ("zero", lambda o: [t.components["ruler"] for t in o.trajectories] == [0.0] * 3),
        ("drop_trajectory", lambda o: all(t.dropped for t in o.trajectories)),
    ]:
        spec = resolve_spec(
            pb.RewardSpec(
                scorers=[pb.ScorerSpec(name="ruler", params_json=params, on_error=policy)]
            )
        )
        outcome = await score_group(spec, _ctx())
        [failure] = outcome.failures
        assert failure.trajectory == GROUP and failure.type == "unavailable", failure
        assert check(outcome), policy


async def test_the_policy_judge_needs_the_policy_endpoint() -> None:
    spec = resolve_spec(
        pb.RewardSpec(
            scorers=[
                pb.ScorerSpec(name="judge", params_json='{"judge": "policy"}', on_error="zero")
            ]
        )
    )
    outcome = await score_group(spec, _ctx())
    assert {f.type for f in outcome.failures} == {"unavailable"}
    assert "policy endpoint" in outcome.failures[0].message


async def test_a_replacing_scorer_keeps_the_rest_as_independent_reward() -> None:
    class Ranker(Scorer):  # how RULER combines by default (combine: replace)
        replaces_reward = True

        async def score(self, ctx: GroupContext, indices: Any) -> list[Any]:
            return [0.9, 0.1, 0.4][: len(indices)]

    entries = [entry("tests", 2.0, _builtin("tests")), entry("ruler", 1.0, Ranker())]
    outcome = await score_group(ResolvedSpec(entries), _ctx())
    assert [t.reward for t in outcome.trajectories] == [0.9, 0.1, 0.4]
    assert [t.independent_reward for t in outcome.trajectories] == [2.0, 0.5, 0.0]
    Ranker.replaces_reward = False  # combine: add
    outcome = await score_group(ResolvedSpec(entries), _ctx())
    assert [t.reward for t in outcome.trajectories] == [2.9, 0.6, 0.4]


def _refused_field(spec: pb.RewardSpec) -> str:
    """The field a spec is refused on at submit."""
    with pytest.raises(InvalidSpec) as caught:
        resolve_spec(spec)
    return caught.value.field


ENTRY_POINT_MODULE = '''
def length_bonus(episode, per_turn=0.1):
    """A bonus per turn."""
    return per_turn * episode.turns
'''


async def test_custom_scorers_come_from_entry_points(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_plugin(
        tmp_path,
        monkeypatch,
        "artfleet_test_plugin",
        ENTRY_POINT_MODULE,
        "[artfleet.scorers]\nlength_bonus = artfleet_test_plugin:length_bonus\n"
        "process = artfleet_test_plugin:length_bonus\n",  # built-ins cannot be replaced
    )
    registry.cache_clear()
    try:
        spec = pb.RewardSpec(
            scorers=[
                pb.ScorerSpec(name="length_bonus", params_json='{"per_turn": 0.5}'),
                pb.ScorerSpec(name="process"),
            ]
        )
        outcome = await score_group(resolve_spec(spec), _ctx([pb.Episode(turns=3)]))
        assert outcome.trajectories[0].components == {"length_bonus": 1.5, "process": 0.0}
        bad = pb.RewardSpec(scorers=[pb.ScorerSpec(name="length_bonus", params_json='{"x": 1}')])
        assert _refused_field(bad) == "reward[0].params.x"
    finally:
        registry.cache_clear()


async def test_a_group_error_drops_only_the_trajectories_it_scored() -> None:
    class Down(Scorer):
        async def score(self, ctx: GroupContext, indices: Any) -> list[Any]:
            raise ConnectionError("judge down")

    gated = entry(
        "ruler", 1.0, Down(), on_error="drop_trajectory", gate=GateModel(scorer="tests", min=0.2)
    )
    outcome = await score_group(
        ResolvedSpec([entry("tests", 1.0, _builtin("tests")), gated]), _ctx()
    )
    # Trajectory 2 ran no tests: gated out, not judged, so not dropped.
    assert [t.dropped for t in outcome.trajectories] == [True, True, False]
    [failure] = outcome.failures
    assert (failure.trajectory, failure.type) == (GROUP, "error")


MESSAGE_SCORERS_MODULE = '''
def art_reward(trajectory, bonus=0.0):
    """An ART script's reward function: it reads the trajectory's messages."""
    last = trajectory.messages()[-1]
    return float("42" in last["content"]) + bonus + trajectory.metrics["turns"]


async def by_messages(messages, episode):
    return 1.0 if episode.finish == "submit" and len(messages) == 2 else 0.0
'''


async def test_a_custom_scorer_gets_the_trajectory_or_its_messages(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_plugin(
        tmp_path,
        monkeypatch,
        "artfleet_test_messages",
        MESSAGE_SCORERS_MODULE,
        "[artfleet.scorers]\nart_reward = artfleet_test_messages:art_reward\n"
        "by_messages = artfleet_test_messages:by_messages\n",
    )
    trajectory = pb.Trajectory(
        messages_and_choices=[
            pb.MessageOrChoice(message=pb.ChatMessage(role="user", content="6 times 7?")),
            pb.MessageOrChoice(message=pb.ChatMessage(role="assistant", content="It is 42.")),
        ],
        metrics={"turns": pb.Scalar(int_value=1)},
    )
    ctx = GroupContext([trajectory], [pb.Episode(finish="submit")], None, _runtime())
    registry.cache_clear()
    try:
        spec = pb.RewardSpec(
            scorers=[
                pb.ScorerSpec(name="art_reward", params_json='{"bonus": 0.5}'),
                pb.ScorerSpec(name="by_messages"),
            ]
        )
        outcome = await score_group(resolve_spec(spec), ctx)
        assert outcome.trajectories[0].components == {"art_reward": 2.5, "by_messages": 1.0}
        taken = pb.RewardSpec(
            scorers=[pb.ScorerSpec(name="art_reward", params_json='{"trajectory": 1}')]
        )
        assert _refused_field(taken) == "reward[0].params.trajectory"
    finally:
        registry.cache_clear()


async def test_rollout_reward_keeps_the_reward_the_rollout_gave() -> None:
    trajectories = [pb.Trajectory(reward=0.7), pb.Trajectory(reward=-1.0)]
    ctx = GroupContext(trajectories, [pb.Episode(), pb.Episode()], None, _runtime())
    spec = pb.RewardSpec(scorers=[pb.ScorerSpec(name="rollout_reward")])
    outcome = await score_group(resolve_spec(spec), ctx)
    assert [t.reward for t in outcome.trajectories] == [0.7, -1.0]
    with pytest.raises(InvalidSpec, match="rollout_reward takes no parameters"):
        resolve_spec(
            pb.RewardSpec(scorers=[pb.ScorerSpec(name="rollout_reward", params_json='{"x": 1}')])
        )
