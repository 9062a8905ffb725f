"""The four gRPC services, real and in one process, for hostile-input and auth tests and
bench/fuzz_bench.py.

Each runs as its entrypoint builds it (`TrainerApp`, `RolloutRuntime`, `RewardApp`,
`SandboxApp`: auth, error mapping, health) on port 0 against a real Redis, on an event loop
in a thread of its own, so synchronous drivers (hypothesis) can call them with deadlines.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
import tempfile
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pydantic import SecretStr

from artfleet.runtime.service import free_port

T = TypeVar("T")
TOKEN = "fuzz-" + secrets.token_hex(12)
SERVICES = (
    "artfleet.v1.Trainer",
    "artfleet.v1.Rollout",
    "artfleet.v1.Reward",
    "artfleet.v1.Sandbox",
)


class _App(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@dataclass
class FuzzFleet:
    """Where each service listens (by its full proto name) and the token they accept."""

    loop: asyncio.AbstractEventLoop
    ports: dict[str, int] = field(default_factory=dict)
    metrics_ports: dict[str, int] = field(default_factory=dict)
    token: str = TOKEN
    apps: list[_App] = field(default_factory=list)

    def target(self, service: str) -> str:
        return f"127.0.0.1:{self.ports[service]}"

    def call(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


def _settings(**values: Any) -> dict[str, Any]:
    return {"api_token": SecretStr(TOKEN), "port": 0, "metrics_port": 0, **values}


async def _start(fleet: FuzzFleet, redis_url: str, workdir: str) -> None:
    from artfleet_reward.__main__ import RewardApp
    from artfleet_reward.settings import RewardSettings
    from artfleet_rollout.app import RolloutRuntime
    from artfleet_rollout.settings import RolloutSettings
    from artfleet_sandbox.__main__ import SandboxApp
    from artfleet_sandbox.local_backend.config import DEFAULT_SANDBOX_PATH
    from artfleet_sandbox.settings import SandboxSettings
    from artfleet_trainer.app import TrainerApp
    from artfleet_trainer.settings import TrainerSettings

    sandbox = SandboxApp(
        SandboxSettings(
            **_settings(replica_id="fuzz-sandbox"),
            sandbox_backend="local",
            sandbox_allow_unisolated=True,  # CI machines without bubblewrap fuzz it too
            max_timeout_s=2,
            max_sessions=64,
            idle_ttl_s=30,
            sandbox_path=f"{os.path.dirname(sys.executable)}:{DEFAULT_SANDBOX_PATH}",
            bwrap_expose_paths=[sys.base_prefix, sys.prefix],
            workspace_root=os.path.join(workdir, "sandbox"),
        )
    )
    await _up(fleet, "artfleet.v1.Sandbox", sandbox)
    reward = RewardApp(RewardSettings(**_settings(judge_timeout_s=2)))
    await _up(fleet, "artfleet.v1.Reward", reward)
    rollout = RolloutRuntime(
        RolloutSettings(
            **_settings(redis_url=redis_url, replica_id="fuzz-rollout"),
            sandbox_target=fleet.target("artfleet.v1.Sandbox"),
            reward_target=fleet.target("artfleet.v1.Reward"),
            model_retries=0,
            model_timeout_s=2,
            exec_timeout_s=2,
            check_timeout_s=2,
            celery_worker=False,
        )
    )
    await _up(fleet, "artfleet.v1.Rollout", rollout)
    trainer = TrainerApp(
        TrainerSettings(
            **_settings(redis_url=redis_url),
            rollout_target=fleet.target("artfleet.v1.Rollout"),
            reward_target=fleet.target("artfleet.v1.Reward"),
            sandbox_target=fleet.target("artfleet.v1.Sandbox"),
            art_path=os.path.join(workdir, "art"),
            inference_engine="torch",
            inference_port=free_port(),
        )
    )
    await _up(fleet, "artfleet.v1.Trainer", trainer)


async def _up(fleet: FuzzFleet, name: str, app: Any) -> None:
    await app.start()
    fleet.apps.append(app)
    fleet.ports[name] = app.server.port
    fleet.metrics_ports[name] = app.server.metrics.port


async def _stop(fleet: FuzzFleet) -> None:
    for app in reversed(fleet.apps):
        await app.stop()


@contextmanager
def running_fleet(redis_url: str) -> Iterator[FuzzFleet]:
    """Start the four services (sandbox, reward, rollout, trainer); stop them after."""
    import threading

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fuzz-fleet", daemon=True)
    thread.start()
    fleet = FuzzFleet(loop)
    with tempfile.TemporaryDirectory(prefix="artfleet-fuzz-") as workdir:
        try:
            fleet.call(_start(fleet, redis_url, workdir), timeout=180)
            yield fleet
        finally:
            fleet.call(_stop(fleet), timeout=120)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(30)


async def _live_ids(fleet: FuzzFleet) -> list[str]:
    from artfleet.runtime.rpc.client import aio_channel
    from artfleet.v1 import sandbox_pb2, sandbox_pb2_grpc

    async with aio_channel(fleet.target("artfleet.v1.Sandbox"), fleet.token) as channel:
        stub = sandbox_pb2_grpc.SandboxStub(channel)
        live = await stub.CreateSession(sandbox_pb2.CreateSessionRequest(), timeout=30)
        # More live ones: a fuzzed CloseSession may end any of them.
        spares = [await stub.CreateSession(sandbox_pb2.CreateSessionRequest()) for _ in range(3)]
        closed = await stub.CreateSession(sandbox_pb2.CreateSessionRequest(), timeout=30)
        await stub.CloseSession(
            sandbox_pb2.CloseSessionRequest(session_id=closed.session_id), timeout=30
        )
    replica, _, rest = live.session_id.partition(".")
    other = "f" * len(replica) if replica != "f" * len(replica) else "e" * len(replica)
    return [
        live.session_id,  # a live session of this replica
        *(spare.session_id for spare in spares),
        closed.session_id,  # a closed one
        f"{other}.{rest}",  # the same id on another replica
        f"{replica}.{'0' * len(rest)}",  # well formed, never issued
        f"{replica}.",
        "sb-other-replica.0123456789abcdef0123456789abcdef",
    ]


def live_ids(fleet: FuzzFleet) -> list[str]:
    """Ids worth sending: sessions live, closed and of other replicas (sandbox)."""
    return fleet.call(_live_ids(fleet), timeout=60)


def seeds() -> dict[str, Any]:
    """A valid request per method whose session id the fuzzer fills in: focused cases change
    one field of these, so they get past the first check to the work behind it."""
    from artfleet.v1 import rollout_pb2 as ro
    from artfleet.v1 import sandbox_pb2 as sb

    prefix = "/artfleet.v1.Sandbox/"
    dead_policy = "http://127.0.0.1:9/v1"  # the discard port: refused at once
    return {
        prefix + "Exec": sb.ExecRequest(command="echo fuzz; ls", timeout_s=2),
        prefix + "WriteFiles": sb.WriteFilesRequest(files=[sb.File(path="a.txt", content=b"x")]),
        prefix + "ReadFile": sb.ReadFileRequest(path="a.txt"),
        prefix + "RunTests": sb.RunTestsRequest(command="true", timeout_s=2),
        "/artfleet.v1.Rollout/CheckPolicy": ro.CheckPolicyRequest(
            model_base_url=dead_policy, policy="fuzz@0"
        ),
        "/artfleet.v1.Rollout/DescribeEnvironment": ro.DescribeEnvironmentRequest(
            name="math-single"
        ),
        # Every check before the episodes passes but the environment's, which no worker
        # has: the task's fields reach validation, no episode runs (a dead policy would
        # hold the group through its outage).
        "/artfleet.v1.Rollout/RunGroup": ro.RunGroupRequest(
            task=ro.GroupTask(
                job_id="fuzz",
                group_id="fuzz-0",
                policy="fuzz@0",
                model_base_url=dead_policy,
                scenario_id="d1-000",
                environment="fuzz-no-such-environment",
                rollouts=1,
                max_turns=1,
                max_tokens=16,
                max_context_tokens=512,
            )
        ),
    }
