"""`artfleet eval run` / `eval compare` against the real Rollout gRPC server, sandbox and
reward services of test_rollout_cli (its fixtures), and the torch backend's policy server.

Fast: a policy endpoint that serves no model: the checks before any sample (unknown model,
a path for a model, an unreachable endpoint, a refused key) with their exit codes.
Slow: SmolLM2 with k = 2 on two tasks; the reported pass@k equals the count made by hand
from the saved trajectories.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path

import pytest
from test_rollout_cli import (  # the same real services, reused
    TOKEN,
    Fleet,
    fleet,
    model_fleet,
    reward_target,
    sandbox_target,
)
from typer.testing import CliRunner, Result

from artfleet_cli.main import app

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
__all__ = ["fleet", "model_fleet", "reward_target", "sandbox_target"]


async def cli(args: list[str], env: Mapping[str, str] | None = None) -> Result:
    runner = CliRunner()
    environ = {"ARTFLEET_API_TOKEN": TOKEN, **(env or {})}
    return await asyncio.to_thread(lambda: runner.invoke(app, ["eval", *args], env=environ))


def _run_args(fleet: Fleet, model: str = "ghost@0", base_url: str = "") -> list[str]:
    args = ["run", "--target", fleet.rollout_target, "--base-url", base_url or fleet.policy_url]
    return [*args, "--model", model, "--split", "test", "--k", "2", "--max-tasks", "2"]


async def test_a_model_the_endpoint_does_not_serve_is_exit_2_before_any_sample(
    fleet: Fleet, tmp_path: Path
) -> None:
    result = await cli([*_run_args(fleet), "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "model 'ghost@0' is not served at http://127.0.0.1:" in result.stderr
    assert "it lists: none" in result.stderr and "name@step" in result.stderr
    assert not (tmp_path / "summary.json").exists()  # stopped before running samples
    bad = await cli(["run", *_run_args(fleet)[1:], "--split", "nope"])
    assert bad.exit_code == 2 and "no scenario in split 'nope'" in bad.stderr


@pytest.mark.parametrize(
    ("model", "instead"),
    [
        ("/data/.art/artfleet/models/agent-1a2b/checkpoints/0003", "--model agent-1a2b@3"),
        ("./.art/artfleet/models/agent-1a2b/", "--model agent-1a2b"),
        ("~/models/qwen-lora", "--model qwen-lora if it is a trained model"),
        ("~/Downloads/qwen-lora", "name@step"),
    ],
)
async def test_a_path_given_as_the_model_says_what_to_type(
    fleet: Fleet, model: str, instead: str
) -> None:
    result = await cli(_run_args(fleet, model=model))
    assert result.exit_code == 2, result.output
    assert "not a path" in result.stderr and instead in result.stderr


async def test_an_unreachable_endpoint_is_exit_1_naming_the_url_never_a_secret(
    fleet: Fleet,
) -> None:
    url = "http://someone:hunter2@127.0.0.1:1/v1?key=hunter2"
    result = await cli(_run_args(fleet, base_url=url))
    assert result.exit_code == 1, result.output
    assert "cannot reach the policy endpoint http://127.0.0.1:1/v1" in result.stderr
    assert "hunter2" not in result.output and TOKEN not in result.output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--base-url", "127.0.0.1:8000/v1"], "is not an http(s) URL"),
        (["--api-key-env", "WRONG_KEY"], "refused the key in WRONG_KEY"),
        (["--api-key-env", "NOT_SET_ANYWHERE"], "NOT_SET_ANYWHERE is not set"),
        (["--k", "0"], "--k"),
    ],
)
async def test_bad_eval_input_is_exit_2_with_the_cause(
    fleet: Fleet, extra: list[str], message: str
) -> None:
    result = await cli([*_run_args(fleet), *extra])
    assert result.exit_code == 2, result.output
    assert message in result.output


def _summary(
    path: Path, tasks: dict[str, list[bool]], policy: str, served_policy: str = ""
) -> Path:
    results = [
        {
            "scenario_id": name,
            "rewards": [float(p) for p in passed],
            "successes": sum(passed),
            "samples": len(passed),
        }
        for name, passed in tasks.items()
    ]
    path.mkdir()
    data = {"k": 2, "split": "test", "tasks": len(results), "results": results, "policy": policy}
    if served_policy:
        data["served_policy"] = served_policy
    (path / "summary.json").write_text(json.dumps(data))
    return path


async def test_compare_prints_per_task_deltas_and_a_paired_test(tmp_path: Path) -> None:
    a = _summary(tmp_path / "a", {f"t{i}": [False, False] for i in range(6)}, "base@0")
    b = _summary(tmp_path / "b", {f"t{i}": [True, i < 3] for i in range(6)}, "agent@5")
    result = await cli(["compare", str(a), str(b / "summary.json")])
    assert result.exit_code == 0, result.output
    assert "t5" in result.stdout and "+0.500" in result.stdout and "+1.000" in result.stdout
    assert "mean delta +0.750" in result.stdout
    assert "wins 6 / losses 0 / ties 0" in result.stdout
    assert "sign test p = 0.0312" in result.stdout  # 2 / 2**6
    missing = await cli(["compare", str(a), str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "cannot read an evaluation" in missing.stderr
    bad = await cli(["compare", str(a), str(b), "--metric", "accuracy"])
    assert bad.exit_code == 2 and "--metric" in bad.stderr


async def test_compare_several_against_a_baseline_one_row_each_and_json(tmp_path: Path) -> None:
    base = _summary(tmp_path / "base", {f"t{i}": [False, False] for i in range(6)}, "base@0")
    b = _summary(tmp_path / "b", {f"t{i}": [True, True] for i in range(6)}, "agent@best", "agent@3")
    # c ran 4 of the baseline's tasks and one of its own: 4 paired, 3 dropped.
    c_tasks = {**{f"t{i}": [True, False] for i in range(4)}, "extra": [True, True]}
    c = _summary(tmp_path / "c", c_tasks, "other@2")
    shown = await cli(["compare", str(base), str(b), str(c)])
    assert shown.exit_code == 0, shown.output
    # Piped: one tab-separated line per evaluation, paths whole.
    rows = {cells[0]: cells[1:] for cells in (x.split("\t") for x in shown.stdout.splitlines())}
    assert rows[str(base)] == ["base@0", "0.000", "baseline", "-", "6"]
    assert rows[str(b)] == ["agent@best (agent@3)", "1.000", "+1.000", "+1.000 .. +1.000", "6"]
    assert rows[str(c)][:3] == ["other@2", "0.500", "+0.500"] and rows[str(c)][4] == "4"
    assert "3 task(s) not in both" in shown.stdout

    as_json = await cli(["compare", str(base), str(b), str(c), "--json"])
    assert as_json.exit_code == 0, as_json.output
    first, second, third = json.loads(as_json.stdout)
    assert first["baseline"] and first["score"] == 0.0 and first["tasks"] == 6
    assert second["served_policy"] == "agent@3" and second["delta"] == 1.0
    assert second["ci95"] == [1.0, 1.0] and second["paired_tasks"] == 6
    assert (third["score"], third["delta"], third["paired_tasks"]) == (0.5, 0.5, 4)
    assert third["dropped_tasks"] == {"only_baseline": ["t4", "t5"], "only_this": ["extra"]}
    alone = await cli(["compare", str(base)])
    assert alone.exit_code == 2 and "at least one evaluation" in alone.stderr
    apart = _summary(tmp_path / "apart", {"z": [True]}, "z@1")
    disjoint = await cli(["compare", str(base), str(b), str(apart)])
    assert disjoint.exit_code == 2 and "shares no task with the baseline" in disjoint.stderr


@pytest.mark.slow
async def test_pass_at_k_with_a_real_policy_matches_a_hand_count(
    model_fleet: tuple[Fleet, str], tmp_path: Path
) -> None:
    fleet, name = model_fleet
    args = ["run", "--target", fleet.rollout_target, "--base-url", fleet.policy_url]
    args += ["--model", name, "--api-key-env", "POLICY_KEY", "--split", "test", "--k", "2"]
    args += ["--max-tasks", "2", "--max-turns", "2", "--max-tokens", "48"]
    result = await cli([*args, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    records = [json.loads(p.read_text()) for p in (tmp_path / "trajectories").glob("*.json")]
    assert len(records) == 4  # 2 tasks x k
    by_task: dict[str, list[bool]] = {}
    for record in records:
        assert record["messages"][-1]["role"] in ("assistant", "tool", "user")
        assert record["metadata"]["policy"] == name
        by_task.setdefault(record["metadata"]["scenario_id"], []).append(
            bool(record["metrics"]["check_passed"])
        )
    # k = n = 2: pass@2 of a task is 1 when either sample passed.
    hand = sum(any(passed) for passed in by_task.values()) / len(by_task)
    assert summary.get("pass_at_k", 0.0) == pytest.approx(hand)
    assert f"pass@2 {hand:.3f}" in result.stdout
