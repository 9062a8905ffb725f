"""`artfleet eval run` against the trainer's torch endpoint for policies no job is training:
a finished job's older checkpoint `name@step` and the base model by name, as a
restarted trainer serves them (frozen.py), through the real Rollout, Sandbox and Reward
services of test_rollout_cli; summary.json records which checkpoint `name@best` or a plain
name was. SmolLM2, so slow."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import torch
from test_eval_cli import cli
from test_rollout_cli import TOKEN, Fleet, reward_target, sandbox_target, start_rollout

from artfleet.contracts.art_types import art
from artfleet.contracts.checkpoint_layout import model_dir, write_best
from artfleet_trainer.torch_backend import checkpoints
from artfleet_trainer.torch_backend.backend import TorchBackend

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]
__all__ = ["reward_target", "sandbox_target"]
BASE = "smollm2-135m-instruct"
NAME = "agent-finished1"


@pytest.fixture
async def restarted(
    sandbox_target: str, reward_target: str, tmp_path: Path
) -> AsyncIterator[Fleet]:
    """A job trained `NAME` to step 2 and ended; then the trainer restarted."""
    art_path = str(tmp_path / "art")
    first = TorchBackend(path=art_path, api_key=TOKEN)
    model: art.TrainableModel[Any, Any] = art.TrainableModel(
        name=NAME, project="it", base_model=BASE
    )
    await model.register(first)  # step 0 on disk
    peft_model = first.peft_model_of(model)
    for step in (1, 2):
        with torch.no_grad():  # a distinct adapter per step
            for name, param in peft_model.named_parameters():
                if "lora_B" in name:
                    param.fill_(0.001 * step)
        checkpoints.save_checkpoint(peft_model, checkpoints.model_dir(art_path, model), step)
    await first.close()
    backend = TorchBackend(path=art_path, api_key=TOKEN)
    await backend.start_serving()
    assert backend.base_url is not None
    server, runner, target = await start_rollout(sandbox_target, reward_target)
    try:
        yield Fleet(target, backend.base_url)
    finally:
        await server.stop(1)
        await runner.stop()
        await backend.close()


def _answered_as(base_url: str, model: str) -> tuple[int, str]:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    request = urllib.request.Request(
        f"{base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as answer:
            return answer.status, str(json.loads(answer.read())["model"])
    except urllib.error.HTTPError as exc:
        return exc.code, ""


async def _eval(fleet: Fleet, model: str, out: Path) -> tuple[int, dict[str, Any]]:
    args = ["run", "--target", fleet.rollout_target, "--base-url", fleet.policy_url]
    args += ["--model", model, "--api-key-env", "POLICY_KEY", "--split", "test", "--k", "2"]
    args += ["--max-tasks", "1", "--max-turns", "1", "--max-tokens", "24", "--out", str(out)]
    result = await cli(args)
    summary = json.loads((out / "summary.json").read_text())
    return result.exit_code, summary


async def test_a_finished_jobs_older_checkpoint_and_the_base_model_are_evaluated(
    restarted: Fleet, tmp_path: Path
) -> None:
    for model in (f"{NAME}@1", BASE):
        code, summary = await _eval(restarted, model, tmp_path / model)
        assert code == 0, summary
        assert summary["policy"] == model
        assert [r["samples"] for r in summary["results"]] == [2]
    # Plain name = its latest checkpoint; what no one wrote is not served.
    url = restarted.policy_url
    assert await asyncio.to_thread(_answered_as, url, NAME) == (200, f"{NAME}@2")
    assert await asyncio.to_thread(_answered_as, url, f"{NAME}@1") == (200, f"{NAME}@1")
    for unknown in (f"{NAME}@7", "ghost", "/etc"):
        assert (await asyncio.to_thread(_answered_as, url, unknown))[0] == 404
    # A step never written is refused before any sample (exit 2), with no summary left.
    args = ["run", "--target", restarted.rollout_target, "--base-url", url]
    args += ["--model", f"{NAME}@7", "--api-key-env", "POLICY_KEY"]
    args += ["--out", str(tmp_path / "missing")]
    result = await cli(args)
    assert result.exit_code == 2, result.output
    assert f"'{NAME}@7' is not served" in result.stderr
    assert not (tmp_path / "missing" / "summary.json").exists()


async def test_the_summary_records_the_checkpoint_an_alias_named(
    restarted: Fleet, tmp_path: Path
) -> None:
    write_best(model_dir(tmp_path / "art", "it", NAME), 1, "pass_at_k", 0.5)
    for typed, served in ((f"{NAME}@best", f"{NAME}@1"), (NAME, f"{NAME}@2")):
        code, summary = await _eval(restarted, typed, tmp_path / typed)
        assert code == 0, summary
        assert (summary["policy"], summary["served_policy"]) == (typed, served)
