"""A plugin's sandbox sessions against a real sandbox replica (local backend, a process):
they are the worker's, under its owner lease, like the bundled agents' sessions. A rollout
stuck inside `sandbox()` is ended by the episode timeout and its session closed at once;
a worker SIGKILLed while its plugin holds a session leaves nothing open past the lease."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from art_quiz import PLUGIN
from plugin_dist import install_plugin
from pydantic import SecretStr
from sandbox_replica import TOKEN, Replica, replicas

from artfleet.clients.sandbox import SandboxRouter
from artfleet.runtime.rpc.client import aio_channel
from artfleet.v1 import rollout_pb2, sandbox_pb2_grpc
from artfleet.v1 import sandbox_pb2 as pb
from artfleet_rollout.adapters import GrpcWorkspaces
from artfleet_rollout.agents.kinds.art import PluginFailure
from artfleet_rollout.environments import get_environment
from artfleet_rollout.environments import registry as environments
from artfleet_rollout.episode import EpisodeContext, run_episode
from artfleet_rollout.ports import Policy
from artfleet_rollout.settings import RolloutSettings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
__all__ = ["replicas"]  # the fixture, from sandbox_replica
LEASE_S = 6.0
ENTRY_POINTS = "[artfleet.environments]\nsandbox-hangs = artfleet_test_quiz:sandbox_hangs\n"
CREATED = "artfleet_sandbox_sessions_created_total"
REAPED_BY_LEASE = 'artfleet_sandbox_reaped_sessions_total{reason="lease"}'

# A rollout worker's episode of the plugin, holding its sandbox session until killed.
WORKER = """
import asyncio, sys
from pydantic import SecretStr
from artfleet.clients.sandbox import SandboxRouter
from artfleet.v1 import rollout_pb2
from artfleet_rollout.adapters import GrpcWorkspaces
from artfleet_rollout.environments import get_environment
from artfleet_rollout.episode import EpisodeContext, run_episode
from artfleet_rollout.settings import RolloutSettings

async def main():
    target, token, owner, lease_s = sys.argv[1:5]
    router = SandboxRouter(target, token, owner=owner, lease_s=float(lease_s))
    env = get_environment("sandbox-hangs")
    task = rollout_pb2.GroupTask(
        job_id="plugin-job", environment="sandbox-hangs", scenario_id="one-plus-one",
        policy="quiz@0", model_base_url="http://127.0.0.1:9/v1",
    )
    settings = RolloutSettings(api_token=SecretStr(token))
    # The policy is never asked: the rollout opens its sandbox and waits there.
    ctx = EpisodeContext(task, env.get("one-plus-one"), None, GrpcWorkspaces(router),
                         settings, agent=env.agent)
    await run_episode(ctx, 0)

asyncio.run(main())
"""


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    site = tmp_path / "site"
    site.mkdir()
    install_plugin(site, monkeypatch, "artfleet_test_quiz", PLUGIN, ENTRY_POINTS)
    environments.reload_plugins()
    yield site
    environments.reload_plugins()


def _replica(tmp_path: Path, replicas: list[Replica]) -> Replica:
    (tmp_path / "logs").mkdir(exist_ok=True)
    replica = Replica(tmp_path / "ws", tmp_path / "logs").start()
    replicas.append(replica)
    return replica


async def _owned(target: str, owner: str) -> int:
    async with aio_channel(target, TOKEN) as channel:
        stub = sandbox_pb2_grpc.SandboxStub(channel)
        reply = await stub.RenewLease(pb.RenewLeaseRequest(owner=owner), timeout=30)
    return int(reply.sessions)


async def test_the_episode_timeout_closes_a_stuck_plugins_session(
    plugin: Path, replicas: list[Replica], tmp_path: Path
) -> None:
    replica = _replica(tmp_path, replicas)
    env = get_environment("sandbox-hangs")
    task = rollout_pb2.GroupTask(
        job_id="plugin-job", environment="sandbox-hangs", scenario_id="one-plus-one",
        policy="quiz@0", model_base_url="http://127.0.0.1:9/v1",
    )  # fmt: skip
    # Long enough for the session to open on a loaded machine; the rollout then never returns.
    settings = RolloutSettings(api_token=SecretStr(TOKEN), plugin_timeout_s=15)
    async with SandboxRouter(replica.target, TOKEN, owner="worker", lease_s=LEASE_S) as router:
        ctx = EpisodeContext(
            task,
            env.get("one-plus-one"),
            cast(Policy, None),  # never asked: the rollout waits inside its sandbox
            GrpcWorkspaces(router),
            settings,
            agent=env.agent,
        )
        with pytest.raises(PluginFailure, match=r"did not return within 15s"):
            await run_episode(ctx, 0)
        assert replica.metric(CREATED) == 1, "the plugin's session was not open yet"
        # Closed by the rollout's `sandbox()` block as the timeout cancelled it, while the
        # worker (and its lease) lives on: not left to the lease.
        assert await _owned(replica.target, "worker") == 0
    assert replica.metric(REAPED_BY_LEASE) == 0


async def test_a_killed_workers_plugin_session_closes_within_its_lease(
    plugin: Path, replicas: list[Replica], tmp_path: Path
) -> None:
    replica = _replica(tmp_path, replicas)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin), *sys.path])}
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WORKER, replica.target, TOKEN, "killed-worker", str(LEASE_S),
        env=env,
    )  # fmt: skip
    started = time.monotonic()
    while await _owned(replica.target, "killed-worker") == 0:
        assert worker.returncode is None, "the worker exited before its plugin opened a session"
        assert time.monotonic() - started < 120, "the plugin opened no session"
        await asyncio.sleep(0.2)
    worker.send_signal(signal.SIGKILL)
    await worker.wait()
    killed_at = time.monotonic()
    # The deadline is only against a hang: the lease, not the idle TTL, closes it.
    while replica.metric(REAPED_BY_LEASE) < 1:
        assert time.monotonic() - killed_at < 240, "a dead worker's plugin session stayed open"
        await asyncio.sleep(0.2)
    assert await _owned(replica.target, "killed-worker") == 0
