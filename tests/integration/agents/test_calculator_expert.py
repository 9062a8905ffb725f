"""The calculator environment end to end on its real MCP server (stdio, official SDK): the
scripted expert's demonstrations, an agent episode replaying them, and what the SFT phase
makes of them.

The demonstrations must be episodes the agent could have had: the same opening messages
and tools as the agent's own episode of that task, real observations from the server, and
assistant turns that the chat template renders in the very format the policy's tool-call
parser reads back (Hermes), so SFT teaches what rollouts sample.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, cast

import pytest
from agent_fakes import HalfReward, Script, connections, task, tool_call_text
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

from artfleet.contracts import codec
from artfleet.contracts.chat_template import TOOLS_CHATML_TEMPLATE
from artfleet.specs.sft import SftModel
from artfleet_rollout.bundled.expert import demonstrations, main, write_jsonl
from artfleet_rollout.environments import get_environment
from artfleet_rollout.group import GroupRunner
from artfleet_rollout.settings import RolloutSettings
from artfleet_trainer.sft.data import load_samples
from artfleet_trainer.torch_serving.tool_calls import parse_tool_calls

pytestmark = pytest.mark.integration

ENV = "calculator"


@pytest.fixture(scope="module")
def demos() -> list[dict[str, Any]]:
    return asyncio.run(demonstrations(ENV, "train", limit=8))


def _calls(record: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (call["function"]["name"], json.loads(call["function"]["arguments"]))
        for message in record["messages"]
        for call in message.get("tool_calls", [])
    ]


def test_demonstrations_solve_their_tasks_over_three_tool_turns(
    demos: list[dict[str, Any]],
) -> None:
    environment = get_environment(ENV)
    assert [r["task_id"] for r in demos] == [s.id for s in environment.scenarios("train")[:8]]
    for record in demos:
        scenario = environment.get(record["task_id"])
        assert record["score"] == 1.0
        calls = _calls(record)
        assert [name for name, _ in calls] == ["calculate", "calculate", "answer"]
        assert calls[-1][1] == {"value": int(scenario.answer)}
        observations = [
            m["content"]
            for m in record["messages"]
            if m.get("tool_call_id", "").startswith("call_")
        ]
        # The first result is read back: it is an operand of the second call.
        assert int(observations[0]) in calls[1][1].values()
        assert observations[1] == scenario.answer
        assert record["messages"][-1] == {
            "role": "assistant",
            "content": f"The answer is {scenario.answer}.",
        }
        assert [t["function"]["name"] for t in record["tools"]] == ["calculate", "answer"]


async def test_the_agents_episode_of_a_demonstrated_task_opens_the_same_and_succeeds(
    demos: list[dict[str, Any]],
) -> None:
    record = demos[0]
    script = Script(
        [tool_call_text(name, args) for name, args in _calls(record)]
        + [record["messages"][-1]["content"]]
    )
    settings = RolloutSettings(api_token="t", mcp_timeout_s=30)  # type: ignore[arg-type]
    runner = GroupRunner(settings, connect=connections(script, reward=HalfReward()))
    await runner.start()
    try:
        response = await runner.run(task(ENV, record["task_id"], max_turns=5))
    finally:
        await runner.stop()
    assert not response.group.exceptions
    for episode in response.episodes:
        assert episode.evaluated and episode.evaluate_reward == 1.0
        assert episode.check_ran and episode.check_passed
        assert episode.finish == "answer"
    trajectory = codec.trajectory_from_proto(response.group.trajectories[0])
    messages = trajectory.messages()
    opening = record["messages"][: len(record["messages"]) - 7]  # before the first call
    assert [dict(m) for m in messages[: len(opening)]] == opening
    assert trajectory.tools == record["tools"]
    tool_results = [m["content"] for m in messages if m["role"] == "tool"][1:]
    assert tool_results == [
        m["content"] for m in record["messages"][len(opening) :] if m["role"] == "tool"
    ]


async def test_a_wrong_or_second_answer_does_not_pass() -> None:
    scenario = get_environment(ENV).scenarios("test")[0]
    wrong = int(scenario.answer) + 1
    script = Script(
        [
            tool_call_text("answer", {"value": wrong}),
            tool_call_text("answer", {"value": int(scenario.answer)}),
            "Done.",
        ]
    )
    settings = RolloutSettings(api_token="t", mcp_timeout_s=30)  # type: ignore[arg-type]
    runner = GroupRunner(settings, connect=connections(script, reward=HalfReward()))
    await runner.start()
    try:
        response = await runner.run(task(ENV, scenario.id, max_turns=5))
    finally:
        await runner.stop()
    for episode in response.episodes:
        assert episode.evaluate_reward == 0.0 and not episode.check_passed
        assert episode.check_ran
        # The second answer was refused: an invalid step the process rewards can see.
        assert [s.valid_format for s in episode.steps][:2] == [True, False]


def test_sft_reads_them_and_renders_calls_the_parser_reads_back(
    demos: list[dict[str, Any]], tmp_path: Path
) -> None:
    path = tmp_path / "demos.jsonl"
    write_jsonl(demos, path)
    data = load_samples(SftModel(data_path=str(path), min_score=1.0))
    assert len(data.samples) == len(demos) and not data.skipped
    backend = Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")
    tokenizer.chat_template = TOOLS_CHATML_TEMPLATE
    sample = data.samples[0]
    text = str(
        tokenizer.apply_chat_template(
            cast(Any, sample.messages), tools=cast(Any, sample.tools), tokenize=False
        )
    )
    turns = [t.split("<|im_end|>")[0] for t in text.split("<|im_start|>assistant\n")[1:]]
    parsed = [parse_tool_calls(turn)[1] for turn in turns]
    rendered_calls = [
        (call["function"]["name"], json.loads(call["function"]["arguments"]))
        for calls in parsed[1:]  # [0] is the prompt's example call
        for call in calls
    ]
    assert rendered_calls == _calls(demos[0])
    assert turns[-1] == demos[0]["messages"][-1]["content"]


def test_the_command_writes_a_file_and_refuses_an_unknown_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "d.jsonl"
    main([ENV, "--out", str(out), "--limit", "2"])
    assert len(out.read_text().splitlines()) == 2
    assert "2 demonstrations (2 solved)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main(["math-single", "--out", str(out)])
    assert exit_info.value.code == 2
    assert "no scripted expert for 'math-single'" in capsys.readouterr().out
