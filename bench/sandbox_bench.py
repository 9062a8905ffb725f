"""Sandbox benchmark against baselines measured in the same run (machines here are noisy).

    python bench/sandbox_bench.py [--image IMAGE] [--execs N] [--seconds S]

1. Exec latency of a trivial command through our gRPC API vs the raw docker SDK
   `exec_run` on the same container, interleaved (target: p50 ratio <= 1.15).
2. CreateSession served from the warm pool vs a cold `containers.run` with the same
   options (target: p50 ratio <= 0.1).
3. Throughput: 32 sessions running trivial commands concurrently through the API.
4. The same in the session REPL: its exec latency over the raw SDK's, on the
   same container, interleaved (target <= 0.2), and 32 sessions' REPL throughput
   (target >= 3x the raw SDK's figure measured in the same run).

The last lines are `exec_ratio=`, `warm_acquire_ratio=`, `sessions32_exec_per_s=` (all
stateless, as before), `repl_exec_ratio=`, `repl_sessions32_exec_per_s=` and
`raw_sessions32_exec_per_s=`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import docker
from pydantic import SecretStr

from artfleet.runtime.rpc.client import aio_channel
from artfleet.v1 import sandbox_pb2 as pb
from artfleet.v1 import sandbox_pb2_grpc
from artfleet_sandbox.__main__ import SandboxApp
from artfleet_sandbox.docker_backend import DockerBackend
from artfleet_sandbox.docker_backend.config import LABEL_SESSION
from artfleet_sandbox.docker_backend.spec import ContainerRequest, container_options
from artfleet_sandbox.replica import new_session_id
from artfleet_sandbox.settings import SandboxSettings

TOKEN = "bench-token-" + os.urandom(8).hex()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def show(name: str, values: list[float]) -> None:
    print(
        f"{name:<28} n={len(values):<4} p50={pct(values, 0.5) * 1e3:8.2f} ms  "
        f"p95={pct(values, 0.95) * 1e3:8.2f} ms"
    )


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await call()
    return time.perf_counter() - start


async def bench_exec(
    stub: Any, client: docker.DockerClient, deployment: str, n: int
) -> tuple[float, float]:
    """(stateless p50 / raw p50, REPL p50 / raw p50), all three interleaved."""
    session = await stub.CreateSession(pb.CreateSessionRequest())
    container = client.containers.list(filters={"label": f"{LABEL_SESSION}={session.session_id}"})[
        0
    ]
    request = pb.ExecRequest(
        session_id=session.session_id, command="true", mode=pb.EXEC_MODE_STATELESS
    )
    repl_request = pb.ExecRequest(
        session_id=session.session_id, command="true", mode=pb.EXEC_MODE_REPL
    )

    async def ours() -> None:
        assert (await stub.Exec(request)).exit_code == 0

    async def repl() -> None:
        assert (await stub.Exec(repl_request)).exit_code == 0

    async def raw() -> None:
        result = await asyncio.to_thread(
            container.exec_run, ["/bin/sh", "-c", "true"], user="1000:1000"
        )
        assert result.exit_code == 0

    samples: dict[Any, list[float]] = {ours: [], raw: [], repl: []}
    orders = [(ours, raw, repl), (raw, repl, ours), (repl, ours, raw)]
    for i in range(n + 5):  # interleaved, so drift hits all alike; 5 warm-up rounds
        for call in orders[i % 3]:
            took = await timed(call)
            if i >= 5:
                samples[call].append(took)
    await stub.CloseSession(pb.CloseSessionRequest(session_id=session.session_id))
    show("raw docker exec_run", samples[raw])
    show("gRPC Exec (stateless)", samples[ours])
    show("gRPC Exec (REPL)", samples[repl])
    raw_p50 = pct(samples[raw], 0.5)
    return pct(samples[ours], 0.5) / raw_p50, pct(samples[repl], 0.5) / raw_p50


async def bench_acquire(
    stub: Any, backend: DockerBackend, client: docker.DockerClient, image: str, n: int
) -> float:
    cold: list[float] = []
    for _ in range(n):
        req = ContainerRequest(
            new_session_id(backend.replica_id), image, backend.config.defaults, False
        )
        options = container_options(req, backend.config, backend.identity)
        start = time.perf_counter()
        container = await asyncio.to_thread(client.containers.run, **options)
        cold.append(time.perf_counter() - start)
        await asyncio.to_thread(container.remove, force=True, v=True)
    warm: list[float] = []
    for _ in range(n):
        await wait_pool_full(backend, image)
        start = time.perf_counter()
        session = await stub.CreateSession(pb.CreateSessionRequest())
        warm.append(time.perf_counter() - start)
        await stub.CloseSession(pb.CloseSessionRequest(session_id=session.session_id))
    show("cold create+start (SDK)", cold)
    show("CreateSession (warm pool)", warm)
    return pct(warm, 0.5) / pct(cold, 0.5)


async def wait_pool_full(backend: DockerBackend, image: str) -> None:
    pool: Any = backend._pool
    deadline = time.monotonic() + 120
    while len(pool._ready.get(image, ())) < pool.size:
        if time.monotonic() > deadline:
            raise RuntimeError("the warm pool did not refill in 120 s")
        await asyncio.sleep(0.05)


async def api_throughput(
    stub: Any, sessions: list[Any], seconds: float, mode: pb.ExecMode
) -> float:
    done = 0
    stop_at = time.monotonic() + seconds

    async def loop(session_id: str) -> None:
        nonlocal done
        request = pb.ExecRequest(session_id=session_id, command="true", mode=mode)
        while time.monotonic() < stop_at:
            assert (await stub.Exec(request)).exit_code == 0
            done += 1

    start = time.perf_counter()
    await asyncio.gather(*(loop(s.session_id) for s in sessions))
    return done / (time.perf_counter() - start)


async def bench_throughput(
    stub: Any, client: docker.DockerClient, sessions: int, seconds: float
) -> tuple[float, float, float]:
    """(raw SDK, gRPC stateless, gRPC REPL) commands per second, same 32 containers."""
    created = await asyncio.gather(
        *(stub.CreateSession(pb.CreateSessionRequest()) for _ in range(sessions))
    )
    raw_per_s = await raw_throughput(client, created, seconds)
    per_s = await api_throughput(stub, created, seconds, pb.EXEC_MODE_STATELESS)
    repl_per_s = await api_throughput(stub, created, seconds, pb.EXEC_MODE_REPL)
    await asyncio.gather(
        *(stub.CloseSession(pb.CloseSessionRequest(session_id=s.session_id)) for s in created)
    )
    print(f"{sessions} sessions, raw SDK exec_run from {sessions} threads: {raw_per_s:.1f}/s")
    for name, value in (("stateless", per_s), ("REPL", repl_per_s)):
        print(
            f"{sessions} sessions, gRPC Exec ({name}): {value:.1f}/s "
            f"(ratio to raw {value / raw_per_s:.2f})"
        )
    return raw_per_s, per_s, repl_per_s


async def raw_throughput(client: docker.DockerClient, sessions: list[Any], seconds: float) -> float:
    """The same load straight through the SDK: one thread per session's container."""
    containers = [
        client.containers.list(filters={"label": f"{LABEL_SESSION}={s.session_id}"})[0]
        for s in sessions
    ]
    stop_at = time.monotonic() + seconds

    def loop(container: Any) -> int:
        count = 0
        while time.monotonic() < stop_at:
            assert container.exec_run(["/bin/sh", "-c", "true"], user="1000:1000").exit_code == 0
            count += 1
        return count

    loop_ = asyncio.get_running_loop()
    with ThreadPoolExecutor(max_workers=len(containers)) as threads:
        start = time.perf_counter()
        counts = await asyncio.gather(
            *(loop_.run_in_executor(threads, loop, c) for c in containers)
        )
        return sum(counts) / (time.perf_counter() - start)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", default="artfleet/base:bookworm")
    parser.add_argument("--execs", type=int, default=60)
    parser.add_argument("--acquires", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    deployment = f"artfleet-bench-{os.getpid()}"
    settings = SandboxSettings(
        api_token=SecretStr(TOKEN),
        sandbox_backend="docker",
        deployment=deployment,
        sandbox_image=args.image,
        pool_size=2,
        log_level="WARNING",
    )
    client = docker.from_env()
    app = SandboxApp(settings)
    await app.start()
    try:
        async with aio_channel(f"127.0.0.1:{app.server.port}", TOKEN) as channel:
            stub = sandbox_pb2_grpc.SandboxStub(channel)
            backend: Any = app.backend
            exec_ratio, repl_ratio = await bench_exec(stub, client, deployment, args.execs)
            acquire_ratio = await bench_acquire(stub, backend, client, args.image, args.acquires)
            raw_per_s, per_s, repl_per_s = await bench_throughput(stub, client, 32, args.seconds)
    finally:
        await app.stop()
        client.close()
    print(f"exec_ratio={exec_ratio:.3f}")
    print(f"warm_acquire_ratio={acquire_ratio:.3f}")
    print(f"sessions32_exec_per_s={per_s:.1f}")
    print(f"repl_exec_ratio={repl_ratio:.3f}")
    print(f"repl_sessions32_exec_per_s={repl_per_s:.1f}")
    print(f"raw_sessions32_exec_per_s={raw_per_s:.1f}")


if __name__ == "__main__":
    asyncio.run(main())
