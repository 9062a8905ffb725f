"""The tool-calling loop, the sandbox toolbox and the single-turn agent, with in-process
ports (a scripted policy, an in-memory workspace)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agent_fakes import HalfReward, Script, connections, sampled, task, tool_call_text
from rollout_fakes import FakeWorkspaces

from artfleet.contracts.art_types import art
from artfleet.v1 import common_pb2 as pb
from artfleet_rollout.agents.sandbox_tools import (
    EditorError,
    SandboxToolbox,
    insert_after,
    replace_once,
    view,
)
from artfleet_rollout.agents.tool_loop import LoopOptions, run_tool_loop
from artfleet_rollout.agents.toolcalls import requested_calls, text_calls
from artfleet_rollout.group import GroupRunner
from artfleet_rollout.ports import ToolResult, WorkspaceSpec
from artfleet_rollout.settings import RolloutSettings


def _settings() -> RolloutSettings:
    return RolloutSettings(api_token="t", tool_result_chars=200)  # type: ignore[arg-type]


# ---------------------------------------------------------------- parsing


def test_native_tool_calls_win_over_text() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    choice = sampled(tool_call_text("submit", {}), 0, [call])
    [found] = requested_calls(choice, 1)
    assert (found.id, found.name, found.native) == ("c1", "bash", True)


def test_hermes_blocks_are_read_including_an_unclosed_last_one() -> None:
    text = 'x <tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>'
    text += '\n<tool_call>{"name": "submit", "arguments": {}'
    calls = text_calls(text, 3)
    assert [c.name for c in calls] == ["bash", ""]  # the cut block is no JSON: a bad call
    assert json.loads(calls[0].arguments) == {"command": "ls"}
    assert calls[0].id == "call_3_0"


# ---------------------------------------------------------------- editor


def test_editor_view_replace_insert() -> None:
    text = "a\nb\nc\n"
    assert view(text, [2, 3]) == "     2\tb\n     3\tc"
    assert replace_once(text, "b\n", "B\n") == "a\nB\nc\n"
    assert insert_after(text, 0, "top") == "top\na\nb\nc\n"
    assert insert_after("a", 1, "z") == "a\nz\n"
    with pytest.raises(EditorError, match="occurs 2 times"):
        replace_once("x x", "x", "y")
    with pytest.raises(EditorError, match="does not occur"):
        replace_once("x", "q", "y")
    with pytest.raises(EditorError, match="outside"):
        view(text, [2, 9])
    with pytest.raises(EditorError, match="insert_line"):
        insert_after(text, 7, "z")


async def test_sandbox_toolbox_edits_files_and_reports_mistakes() -> None:
    workspaces = FakeWorkspaces()
    workspace = await workspaces.open(WorkspaceSpec("job", {"a.txt": "one\ntwo\n"}))
    box = SandboxToolbox(workspace, exec_timeout_s=5)
    created = await box.call(
        "editor", json.dumps({"command": "create", "path": "n.txt", "file_text": "x\n"})
    )
    assert created.ok and workspace.files["n.txt"] == b"x\n"
    edit = {"command": "str_replace", "path": "a.txt", "old_str": "two", "new_str": "2"}
    assert (await box.call("editor", json.dumps(edit))).ok
    assert workspace.files["a.txt"] == b"one\n2\n"
    missing = await box.call("editor", json.dumps({"command": "view", "path": "nope"}))
    assert not missing.ok and "no such file" in missing.text
    outside = await box.call("editor", json.dumps({"command": "view", "path": "/etc/passwd"}))
    assert not outside.ok and "relative" in outside.text
    bad_json = await box.call("bash", "{not json")
    assert not bad_json.ok and "not valid JSON" in bad_json.text
    ran = await box.call("bash", json.dumps({"command": "ls"}))
    assert ran.ok and ran.exec is not None and "exit_code: 0" in ran.text
    assert (await box.call("submit", "{}")).done


# ---------------------------------------------------------------- the loop


class _Box:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def tools(self) -> list[dict[str, Any]]:
        return [
            {"type": "function", "function": {"name": n, "parameters": {}}}
            for n in ("echo", "submit")
        ]

    async def call(self, name: str, arguments: str) -> ToolResult:
        self.calls.append((name, arguments))
        if name == "submit":
            return ToolResult("bye", done=True)
        return ToolResult("y" * 500 if "long" in arguments else "ok")

    async def close(self) -> None:
        return None


async def test_loop_turns_mistakes_into_results_and_invalid_steps() -> None:
    script = Script(
        [
            tool_call_text("nope", {}),
            "no call at all",
            tool_call_text("echo", {"text": "long"}),
            tool_call_text("echo", {"text": "hi"}),
            tool_call_text("submit", {}),
        ]
    )
    trajectory = art.Trajectory(messages_and_choices=[{"role": "user", "content": "go"}])
    box = _Box()
    trajectory.tools = box.tools()  # type: ignore[assignment]
    episode = pb.Episode()
    options = LoopOptions(
        "tools", max_turns=8, max_tokens=16, max_context_tokens=4096, result_chars=100
    )
    finish = await run_tool_loop(script, box, trajectory, episode, options)
    assert finish == "submit"
    assert [s.valid_format for s in episode.steps] == [False, False, False, True, True]
    assert dict(episode.tool_calls) == {"(unknown)": 1, "echo": 2, "submit": 1}
    assert [n for n, _ in box.calls] == ["echo", "echo", "submit"]  # unknown never ran
    messages = trajectory.messages()
    tool_messages = [m for m in messages if m["role"] == "tool"]
    assert str(tool_messages[0]["content"]).startswith("Error: unknown tool 'nope'")
    assert "[output cut to 100 of 500 characters]" in tool_messages[1]["content"]
    assert tool_messages[0]["tool_call_id"] == "call_1_0"
    assert script.tools[0] == box.tools()  # the model was offered the tools every turn


async def test_mcp_style_loop_ends_on_a_text_answer() -> None:
    script = Script([tool_call_text("echo", {}), "Finished."])
    trajectory = art.Trajectory(messages_and_choices=[{"role": "user", "content": "go"}])
    episode = pb.Episode()
    options = LoopOptions(
        "mcp", max_turns=5, max_tokens=16, max_context_tokens=4096, result_chars=100, text_ends=True
    )
    assert await run_tool_loop(script, _Box(), trajectory, episode, options) == "answer"
    assert episode.steps[-1].is_submit


# ---------------------------------------------------------------- whole episodes


async def test_tool_shell_episode_runs_the_check_and_honours_task_prompt() -> None:
    script = Script(
        [
            tool_call_text("bash", {"command": "echo hello > hello.txt"}),
            tool_call_text("submit", {}),
        ]
    )
    workspaces = FakeWorkspaces()
    runner = GroupRunner(_settings(), connect=connections(script, workspaces))
    await runner.start()
    response = await runner.run(
        task("tool-shell", "create-hello-file", task_prompt="You are careful.")
    )
    await runner.stop()
    assert [e.finish for e in response.episodes] == ["submit", "submit"]
    assert all(e.check_ran and e.agent == "tools" for e in response.episodes)
    assert workspaces.opened[0].commands == ["echo hello > hello.txt"]
    assert all(w.closed for w in workspaces.opened)
    first = response.group.trajectories[0].messages_and_choices[0].message
    assert str(first.content).startswith("You are careful.") and "bash(command)" in first.content
    step = response.episodes[0].steps[0]
    assert step.executed and step.code_modified  # the terminal agent's process facts


async def test_single_turn_episode_opens_no_sandbox_and_carries_the_answer() -> None:
    reward = HalfReward()
    runner = GroupRunner(
        _settings(), connect=connections(Script(["The answer is 7."]), reward=reward)
    )
    await runner.start()
    response = await runner.run(task("math-single", "d1-000", rollouts=3))
    await runner.stop()
    assert len(response.episodes) == 3
    episode = response.episodes[0]
    assert (episode.agent, episode.finish, episode.turns) == ("single", "answer", 1)
    assert episode.expected_answer and reward.requests[0].episodes[0].expected_answer
    messages = response.group.trajectories[0].messages_and_choices
    assert messages[0].message.role == "system" and messages[1].message.role == "user"
    override = await _single_with_prompt("Be brief.")
    assert override == "Be brief."


async def _single_with_prompt(prompt: str) -> str:
    runner = GroupRunner(_settings(), connect=connections(Script(["1"])))
    await runner.start()
    response = await runner.run(task("math-single", "d2-001", rollouts=1, task_prompt=prompt))
    await runner.stop()
    return str(response.group.trajectories[0].messages_and_choices[0].message.content)


async def test_single_turn_episode_records_the_answer_check_as_its_task_check() -> None:
    # d1-000 is "What is 8 + 3?": the task check is the answer_check scorer's default rule
    # (the last number in the reply), so evaluations count a correct answer as a success.
    for reply, passed in (("8 + 3 = 11.", True), ("11 is wrong, it is 12", False)):
        runner = GroupRunner(_settings(), connect=connections(Script([reply])))
        await runner.start()
        response = await runner.run(task("math-single", "d1-000", rollouts=2))
        await runner.stop()
        assert [e.check_ran for e in response.episodes] == [True, True]
        assert [e.check_passed for e in response.episodes] == [passed, passed]
        metrics = response.group.trajectories[0].metrics
        assert metrics["check_passed"].bool_value is passed
