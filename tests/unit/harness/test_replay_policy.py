"""The benchmarks' replay policy (bench/replay_policy.py): script parsing, the answers'
token fields, episode tracking and the overhead figures computed from what it served."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from repo_paths import ROOT

_PATH = ROOT / "bench" / "replay_policy.py"
_SPEC = importlib.util.spec_from_file_location("replay_policy", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
replay = importlib.util.module_from_spec(_SPEC)
sys.modules["replay_policy"] = replay
_SPEC.loader.exec_module(replay)


def test_default_script_is_shell_calls_then_submit() -> None:
    replies = replay.parse_script(replay.DEFAULT_SCRIPT)
    assert [r.tool for r in replies] == ["bash", "bash", "submit"]
    assert replies[0].arguments == '{"command": "ls -la"}'


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        ([], "script: must be a non-empty"),
        ({"tool": "bash"}, "script: must be a non-empty"),
        (["ls"], "script[0]: must be an object"),
        ([{"tool": "bash", "argz": {}}], "script[0]: unknown keys ['argz']"),
        ([{"tool": "bash", "arguments": "ls"}], "script[0].arguments: must be an object"),
        ([{"content": "hi", "arguments": {}}], "script[0].arguments: only a tool call"),
        ([{}], "script[0]: needs a tool or a content"),
        ([{"content": "done"}, {"tool": "submit"}], "script[0].tool: every reply but the last"),
        ([{"tool": 3}], "script[0]: content and tool must be strings"),
    ],
)
def test_bad_scripts_name_the_reply_and_field(raw: object, names: str) -> None:
    with pytest.raises(replay.ScriptError) as caught:
        replay.parse_script(raw)
    assert names in str(caught.value)


def test_answers_carry_vllm_token_fields_and_extend_the_previous_prompt() -> None:
    replies = replay.parse_script(replay.DEFAULT_SCRIPT)
    first = replay.completion(replies, "ep1", 1, "m@3", token_ids=True)
    second = replay.completion(replies, "ep1", 2, "m@3", token_ids=True)
    choice = first["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["id"] == "call_replay_ep1_1" and call["function"]["name"] == "bash"
    sampled = choice["token_ids"]
    assert [e["token"] for e in choice["logprobs"]["content"]] == [f"token_id:{i}" for i in sampled]
    # turn 2 is sampled after turn 1's prompt, its tokens and an observation
    assert second["prompt_token_ids"][: len(first["prompt_token_ids"]) + len(sampled)] == (
        first["prompt_token_ids"] + sampled
    )
    assert first["usage"]["prompt_tokens"] == len(first["prompt_token_ids"])
    assert max(sampled) < 49152  # inside SmolLM2's vocabulary
    plain = replay.completion(replies, "ep1", 1, "m", token_ids=False)
    assert "token_ids" not in plain["choices"][0] and "prompt_token_ids" not in plain


def test_turns_past_the_script_repeat_its_last_reply() -> None:
    replies = replay.parse_script([{"tool": "bash", "arguments": {}}, {"content": "done"}])
    late = replay.completion(replies, "e", 5, "m", token_ids=False)
    assert late["choices"][0]["message"]["content"] == "done"
    assert late["choices"][0]["finish_reason"] == "stop"


def test_episode_and_turn_come_from_this_servers_call_ids() -> None:
    assert replay.episode_of([{"role": "user", "content": "go"}]) == ("", 1)
    messages = [
        {"role": "user", "content": "go"},
        # a demonstration turn the agent wrote: not one of ours
        {"role": "assistant", "content": "<tool_call>{}</tool_call>"},
        {"role": "assistant", "tool_calls": [{"id": "call_7", "type": "function"}]},
        {"role": "assistant", "tool_calls": [{"id": "call_replay_ab_1", "type": "function"}]},
        {"role": "tool", "tool_call_id": "call_replay_ab_1", "content": "x"},
        {"role": "assistant", "tool_calls": [{"id": "call_replay_ab_2", "type": "function"}]},
        {"role": "tool", "tool_call_id": "call_replay_ab_2", "content": "y"},
    ]
    assert replay.episode_of(messages) == ("ab", 3)


def test_turn_gaps_leave_out_the_policys_own_time_and_pair_turns_per_episode() -> None:
    served = [
        replay.Served("a", 1, arrived=0.0, answered=0.5),
        replay.Served("b", 1, arrived=0.1, answered=0.2),
        replay.Served("a", 2, arrived=0.75, answered=1.0),
        replay.Served("b", 2, arrived=1.2, answered=1.3),
        replay.Served("a", 3, arrived=1.5, answered=1.6),
    ]
    assert sorted(replay.turn_gaps(served)) == pytest.approx([0.25, 0.5, 1.0])
    by_turn = replay.gaps_by_turn(served)
    assert sorted(by_turn) == [1, 2]
    assert sorted(by_turn[1]) == pytest.approx([0.25, 1.0]) and by_turn[2] == pytest.approx([0.5])


def test_percentile_interpolates_between_ranks() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert replay.percentile(values, 50) == pytest.approx(2.5)
    assert replay.percentile(values, 95) == pytest.approx(3.85)
    assert replay.percentile([7.0], 95) == 7.0
    with pytest.raises(ValueError, match="no values"):
        replay.percentile([], 50)
