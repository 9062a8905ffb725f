"""An episode whose inference replica is killed mid-turn goes on on the other replica:
two real OpenAI-shaped servers (the benchmarks' replay policy, as processes), the rollout's
own policy routing (`OpenAIClients`), SIGKILL while the replica holds the episode's turn.
Every turn is answered and recorded; no failure, no policy outage."""

from __future__ import annotations

import asyncio
import functools
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import SecretStr
from repo_paths import ROOT
from waiting import wait_for

from artfleet.clients.replicas import ReplicaChoice
from artfleet.runtime.service import free_port
from artfleet.v1 import rollout_pb2
from artfleet_rollout import metrics
from artfleet_rollout.adapters import OpenAIClients
from artfleet_rollout.policy_routing import replica_label
from artfleet_rollout.ports import Policy
from artfleet_rollout.settings import RolloutSettings

pytestmark = pytest.mark.integration

REPLAY = ROOT / "bench" / "replay_policy.py"
TOKEN = "policy-replicas-test-token"
TURNS = 4


def _answers(url: str) -> bool:
    request = urllib.request.Request(f"{url}/models", headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


@pytest.fixture
def replicas() -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """Two replay policies answering after 20 ms a token (a turn takes about a second:
    time to kill one while it holds a turn)."""
    started = {}
    for _ in range(2):
        port = free_port()
        cmd = [sys.executable, str(REPLAY), "--port", str(port), "--token", TOKEN]
        started[f"http://127.0.0.1:{port}/v1"] = subprocess.Popen(
            [*cmd, "--token-latency-ms", "20"]
        )
    try:
        for url in started:
            wait_for(f"{url} answers", functools.partial(_answers, url), timeout_s=60)
        yield started
    finally:
        for proc in started.values():
            proc.kill()
            proc.wait(30)


async def _kill_while_in_flight(
    choice: ReplicaChoice, url: str, proc: subprocess.Popen[bytes], timeout_s: float = 30.0
) -> None:
    """SIGKILL once the replica at `url` has a call of ours in flight."""
    deadline = time.monotonic() + timeout_s
    while choice.in_flight(url) < 1:
        assert time.monotonic() < deadline, f"no call in flight on {url}"
        await asyncio.sleep(0.01)
    proc.kill()


async def _take_turn(episode: Policy, messages: list[Any]) -> None:
    """One turn as the tool agent takes it: the answer and its tool results appended."""
    message = (await episode.complete(messages)).choice.message
    messages.append(message.model_dump(exclude_none=True))
    for call in message.tool_calls or []:
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "ok"})


async def test_an_episode_goes_on_when_its_replica_is_killed_mid_turn(
    replicas: dict[str, subprocess.Popen[bytes]],
) -> None:
    clients = OpenAIClients(RolloutSettings(api_token=SecretStr(TOKEN), model_retries=2))
    task = rollout_pb2.GroupTask(
        model_base_url=",".join(replicas), policy="replay@1", temperature=1.0, max_tokens=64
    )
    policy = clients.policy(task, TOKEN)
    choice = policy._replicas.choice
    episode = policy.for_episode("group/0")
    messages: list[Any] = [{"role": "user", "content": "run the steps"}]
    try:
        await _take_turn(episode, messages)
        first = choice.pinned("group/0") or ""
        failovers = metrics.POLICY_FAILOVERS.labels(replica_label(first))._value.get()
        second_turn = asyncio.ensure_future(_take_turn(episode, messages))
        await _kill_while_in_flight(choice, first, replicas[first])
        await second_turn  # answered: no episode failure, no policy outage
        other = choice.pinned("group/0")
        assert other in replicas and other != first
        for _ in range(TURNS - 2):
            await _take_turn(episode, messages)
            assert choice.pinned("group/0") == other  # the episode stays where it went
    finally:
        await clients.close()
    assert metrics.POLICY_FAILOVERS.labels(replica_label(first))._value.get() == failovers + 1
    # Every turn answered and in the history, the episode's id kept across the replicas
    # (the replay policy names its calls after the episode it first answered).
    calls = [m["tool_calls"][0]["id"] for m in messages if m.get("tool_calls")]
    assert len(calls) == TURNS
    assert len({c.rsplit("_", 1)[0] for c in calls}) == 1
