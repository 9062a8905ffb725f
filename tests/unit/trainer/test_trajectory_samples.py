"""log_sample_rate (the R2E-Gym training script's flag): sampled rollouts as readable
JSON under logs/<experiment>/step_<n>/ in the web console's shape."""

from __future__ import annotations

import json
from pathlib import Path

from artfleet.specs.job import validate_spec
from artfleet.v1 import batch_pb2
from artfleet.v1 import common_pb2 as pb
from artfleet_trainer.jobs import samples


def _group(group_id: str, n: int) -> batch_pb2.BatchGroup:
    call = pb.ToolCall(
        id="c1", type="function", function_name="shell", function_arguments='{"cmd": "ls"}'
    )
    choice = pb.Choice(
        finish_reason="tool_calls",
        message=pb.ChatMessage(role="assistant", has_tool_calls=True, tool_calls=[call]),
    )
    trajectories = []
    for i in range(n):
        t = pb.Trajectory(reward=0.5 * i, tools_json='[{"type": "function"}]')
        t.messages_and_choices.add(message=pb.ChatMessage(role="user", content="list files"))
        t.messages_and_choices.add(choice=choice)
        t.messages_and_choices.add(
            message=pb.ChatMessage(role="tool", content="a.txt", tool_call_id="c1")
        )
        t.metrics["reward_task_check"].float_value = 1.0
        t.metadata["scenario_id"].string_value = f"scn-{group_id}"
        trajectories.append(t)
    return batch_pb2.BatchGroup(
        group_id=group_id, group=pb.TrajectoryGroup(trajectories=trajectories)
    )


def test_rate_one_writes_every_rollout_in_the_console_shape(tmp_path: Path) -> None:
    spec = validate_spec({"experiment": "cot_v1", "log_sample_rate": 1.0})
    job = pb.Job(id="j1", config_hash="abc")
    paths = samples.write_step(str(tmp_path), job, spec, 3, [_group("g0", 2), _group("g1", 2)])
    assert len(paths) == 4
    assert all(p.parent == tmp_path / "cot_v1" / "step_3" for p in paths)
    record = json.loads((tmp_path / "cot_v1" / "step_3" / "g0-1.json").read_text())
    assert set(record) >= {"messages", "tools", "reward", "metrics", "metadata"}
    assert [m["role"] for m in record["messages"]] == ["user", "assistant", "tool"]
    assert record["messages"][1]["tool_calls"][0]["function"]["name"] == "shell"
    assert record["tools"] == [{"type": "function"}]
    assert record["reward"] == 0.5 and record["metrics"]["reward_task_check"] == 1.0
    assert record["metadata"] == {
        "scenario_id": "scn-g0",
        "step": 3,
        "policy_version": 2,
        "job_id": "j1",
        "experiment": "cot_v1",
        "config_hash": "abc",
        "group_id": "g0",
    }


def test_a_fraction_is_sampled_the_same_way_every_time(tmp_path: Path) -> None:
    spec = validate_spec({"log_sample_rate": 0.25})
    groups = [_group(f"g{i}", 8) for i in range(50)]
    job = pb.Job(id="j2")
    first = samples.write_step(str(tmp_path / "a"), job, spec, 1, groups)
    again = samples.write_step(str(tmp_path / "b"), job, spec, 1, groups)
    assert [p.name for p in first] == [p.name for p in again]  # deterministic
    assert 0.15 * 400 < len(first) < 0.35 * 400
    none = validate_spec({})
    assert samples.write_step(str(tmp_path / "c"), job, none, 1, groups) == []
