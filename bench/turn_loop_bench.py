"""One episode's turn path in one process, to compare two revisions under the same load:
the tool agent's loop (`run_tool_loop`, `SandboxToolbox`, `OpenAIPolicy` over HTTP) against
the replay policy (bench/replay_policy.py) and the local sandbox backend (bubblewrap where
installed), with no gRPC, Celery, reward or trainer around it.

    python bench/turn_loop_bench.py [--episodes 40]

The fleet bench (overhead_bench.py) measures the whole platform but takes minutes, so two
of its runs rarely meet the same load on a shared machine. This one takes seconds: run it
on each revision in turn (PYTHONPATH pointing at each revision's src/ and services/),
several times, interleaved.

Last line: `turn_gap_ms_p50=` (every turn; same figure as the fleet bench's headline, from
the replay server's answer leaving to the same episode's next request arriving), with the
p50 after turn 1 and after turn 2 before it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from openai import AsyncOpenAI

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_policy import ReplayPolicy, gaps_by_turn, load_script, percentile

from artfleet.contracts.art_types import art
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import sandbox_pb2
from artfleet_rollout.adapters import OpenAIPolicy
from artfleet_rollout.agents import tool_prompts
from artfleet_rollout.agents.sandbox_tools import SandboxToolbox
from artfleet_rollout.agents.tool_loop import LoopOptions, run_tool_loop
from artfleet_rollout.agents.turns import canonical_tools
from artfleet_rollout.ports import SuiteRun
from artfleet_sandbox.backend import ExecSpec, FileSpec, SessionSpec
from artfleet_sandbox.local_backend import LocalBackend, LocalConfig

_OUTPUT_BYTES = 256 * 1024


class BackendWorkspace:
    """The toolbox's calls made on the backend directly (the gRPC hop left out)."""

    def __init__(self, backend: LocalBackend, session_id: str) -> None:
        self._backend = backend
        self._id = session_id

    async def exec(self, command: str, *, timeout_s: float) -> sandbox_pb2.ExecResult:
        out = await self._backend.exec(self._id, ExecSpec(command, timeout_s, _OUTPUT_BYTES))
        return sandbox_pb2.ExecResult(
            exit_code=out.exit_code, stdout=out.stdout, stderr=out.stderr, timed_out=out.timed_out
        )

    async def write_files(self, files: Mapping[str, str | bytes]) -> None:
        specs = [FileSpec(p, c.encode() if isinstance(c, str) else c) for p, c in files.items()]
        await self._backend.write_files(self._id, specs)

    async def read_file(self, path: str, *, max_bytes: int = 0) -> bytes:
        return (await self._backend.read_file(self._id, path, max_bytes))[0]

    async def run_tests(self, command: str = "", *, timeout_s: float) -> SuiteRun:
        raise NotImplementedError("the tool agent does not run tests")

    async def check(self, command: str, *, timeout_s: float) -> bool:
        result = await self.exec(command, timeout_s=timeout_s)
        return result.exit_code == 0 and not result.timed_out

    async def close(self) -> None:
        await self._backend.close_session(self._id)


async def episode(backend: LocalBackend, policy: OpenAIPolicy, options: LoopOptions) -> None:
    session = await backend.create_session(SessionSpec())
    workspace = BackendWorkspace(backend, session.session_id)
    toolbox = SandboxToolbox(workspace, exec_timeout_s=30)
    tools = canonical_tools(toolbox.tools())
    messages: list[Any] = [
        {"role": "system", "content": tool_prompts.system_text("tools", tools, "")},
        *tool_prompts.shell_demonstration(),
        {"role": "user", "content": "Task: say hello\nFiles: (none)"},
    ]
    trajectory = art.Trajectory(messages_and_choices=messages, tools=tools)  # type: ignore[arg-type]
    await run_tool_loop(policy, toolbox, trajectory, pb.Episode(), options)
    await workspace.close()


async def run(episodes: int) -> None:
    script = load_script("")
    replay = ReplayPolicy(script, "bench-token")
    replay.start()
    backend = LocalBackend(LocalConfig(test_runtime=False))
    await backend.start()
    client = AsyncOpenAI(base_url=replay.base_url, api_key="bench-token")
    policy = OpenAIPolicy(client, model="replay", temperature=1.0, max_tokens=64, timeout_s=60)
    options = LoopOptions(
        agent="tools",
        max_turns=len(script) + 1,
        max_tokens=64,
        max_context_tokens=1 << 20,
        result_chars=4000,
    )
    try:
        for _ in range(5):  # imports, the first connection, the first sandbox dirs
            await episode(backend, policy, options)
        first = len(replay.served)
        started = time.monotonic()
        for _ in range(episodes):
            await episode(backend, policy, options)
        elapsed = time.monotonic() - started
    finally:
        await client.close()
        await backend.stop()
        replay.stop()
    by_turn = gaps_by_turn(replay.served[first:])
    for turn, gaps in sorted(by_turn.items()):
        print(f"after turn {turn}: p50_ms={percentile(gaps, 50) * 1000:.1f} n={len(gaps)}")
    every = [gap for gaps in by_turn.values() for gap in gaps]
    print(f"episodes={episodes} seconds={elapsed:.2f}")
    print(f"turn_gap_ms_p50={percentile(every, 50) * 1000:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=40)
    asyncio.run(run(parser.parse_args().episodes))


if __name__ == "__main__":
    main()
