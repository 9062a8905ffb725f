"""`artfleet eval run` / `eval compare` against the real Rollout gRPC server, sandbox and
reward services of test_rollout_cli (its fixtures), and the torch backend's policy server.

Fast: a policy endpoint that serves no model (every episode fails: no sample, exit 1, the
summary still written). Slow: SmolLM2 with k = 2 on two tasks; the reported pass@k equals
the count made by hand from the saved trajectories.
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

from artfleet.cli.main import app

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
__all__ = ["fleet", "model_fleet", "reward_target", "sandbox_target"]


async def cli(args: list[str], env: Mapping[str, str] | None = None) -> Result:
    runner = CliRunner()
    environ = {"ARTFLEET_API_TOKEN": TOKEN, **(env or {})}
    return await asyncio.to_thread(lambda: runner.invoke(app, ["eval", *args], env=environ))


async def test_an_eval_with_no_sample_back_writes_its_summary_and_exits_1(
    fleet: Fleet, tmp_path: Path
) -> None:
    args = ["run", "--target", fleet.rollout_target, "--base-url", fleet.policy_url]
    args += ["--model", "ghost@0", "--split", "test", "--k", "2", "--max-tasks", "2"]
    result = await cli([*args, "--out", str(tmp_path)])
    assert result.exit_code == 1, result.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["tasks"] == 2 and summary["k"] == 2
    assert all(r.get("samples", 0) == 0 for r in summary["results"])
    bad = await cli(["run", *args[1:], "--split", "nope"])
    assert bad.exit_code == 2 and "no scenario in split 'nope'" in bad.stderr


def _summary(path: Path, tasks: dict[str, list[bool]], policy: str) -> Path:
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
