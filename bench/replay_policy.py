"""A policy that costs nothing, for benchmarks only: an OpenAI-compatible
`/v1/chat/completions` that answers at once with the next reply of a fixed script.

    python bench/replay_policy.py --port 8199 --token T [--script script.json]
        [--token-latency-ms 5 --concurrency 2]

With `--token-latency-ms` each answer takes that long per sampled token, at most
`--concurrency` answers at once (the rest queue): a stand-in for an inference replica
whose capacity, not the client's CPU, bounds throughput (bench/replica_bench.py).

The script is a JSON list of replies, one per assistant turn; each reply is a tool call
`{"tool": "bash", "arguments": {"command": "ls"}}` or a text answer `{"content": "..."}`.
Every reply but the last must be a tool call: its call id carries the episode's id, which
is how later requests of the same episode are recognised (turn k = this server's answers
in the request + 1; turns past the script repeat its last reply).

The answers carry what the rollout and the trainer read from vLLM: logprob entries named
`token_id:<id>`, `token_ids` on the choice and `prompt_token_ids` when the request asks
`return_token_ids`, `tool_calls` with finish reason `tool_calls`, usage. Token ids are
made up (a reply's UTF-8 bytes, within SmolLM2's vocabulary) and consistent across turns:
turn k's prompt is turn k-1's prompt, its sampled ids and a fixed observation block, so
the trainer packs each trajectory as one sequence.

The server records, per request, the episode, the turn and when the request arrived and
its answer left (`time.monotonic()`, the same clock as its host process): `turn_gaps`
turns that into the platform's time between one answer and the next request.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from artfleet.contracts.policy_publish import (
    PUBLISH_PATH,
    PublishPolicy,
    PublishReply,
    ServedPolicies,
    ServedPolicy,
    parse,
)

# A shell turn, another, then submit: the tool agent's (tool-shell) full loop.
DEFAULT_SCRIPT: list[dict[str, Any]] = [
    {"tool": "bash", "arguments": {"command": "ls -la"}},
    {"tool": "bash", "arguments": {"command": "echo hello > hello.txt && cat hello.txt"}},
    {"tool": "submit", "arguments": {}},
]
_VOCAB_BASE = 1000  # made-up ids: 1000 + byte, inside any real vocabulary
_PROMPT_IDS = [_VOCAB_BASE + b for b in b"<system+task>"]
_OBSERVATION_IDS = [_VOCAB_BASE + b for b in b"<observation>"]
_CALL_PREFIX = "call_replay_"


class ScriptError(ValueError):
    """The script is malformed; the message names the reply and the field."""


@dataclass(frozen=True)
class Reply:
    content: str = ""
    tool: str = ""
    arguments: str = "{}"  # JSON text, as OpenAI's tool_calls carry it

    def text(self) -> str:
        """What the model would have sampled (Hermes format for a call)."""
        if not self.tool:
            return self.content
        call = json.dumps({"name": self.tool, "arguments": json.loads(self.arguments)})
        return f"{self.content}<tool_call>\n{call}\n</tool_call>"

    def token_ids(self) -> list[int]:
        return [_VOCAB_BASE + b for b in self.text().encode()] or [_VOCAB_BASE]


def parse_script(raw: Any) -> list[Reply]:
    """The replies of a script (see the module docstring); ScriptError names what is wrong."""
    if not isinstance(raw, list) or not raw:
        raise ScriptError("script: must be a non-empty JSON list of replies")
    replies = []
    for i, item in enumerate(raw):
        where = f"script[{i}]"
        if not isinstance(item, dict):
            raise ScriptError(f"{where}: must be an object")
        unknown = set(item) - {"content", "tool", "arguments"}
        if unknown:
            raise ScriptError(f"{where}: unknown keys {sorted(unknown)}")
        content, tool = item.get("content", ""), item.get("tool", "")
        if not isinstance(content, str) or not isinstance(tool, str):
            raise ScriptError(f"{where}: content and tool must be strings")
        arguments = item.get("arguments", {})
        if not isinstance(arguments, dict):
            raise ScriptError(f"{where}.arguments: must be an object")
        if "arguments" in item and not tool:
            raise ScriptError(f"{where}.arguments: only a tool call has arguments")
        if not tool and not content:
            raise ScriptError(f"{where}: needs a tool or a content")
        if not tool and i < len(raw) - 1:
            raise ScriptError(f"{where}.tool: every reply but the last must be a tool call")
        replies.append(Reply(content, tool, json.dumps(arguments, sort_keys=True)))
    return replies


def prompt_ids(replies: list[Reply], turn: int) -> list[int]:
    """Turn `turn`'s made-up prompt: the first prompt, then each earlier turn's sampled ids
    and an observation, so every turn extends the one before."""
    ids = list(_PROMPT_IDS)
    for earlier in range(1, turn):
        ids += reply_for(replies, earlier).token_ids() + _OBSERVATION_IDS
    return ids


def reply_for(replies: list[Reply], turn: int) -> Reply:
    return replies[min(turn, len(replies)) - 1]


def episode_of(messages: list[dict[str, Any]]) -> tuple[str, int]:
    """(episode id, turn) of a request: the id this server's first answer carried ("" on a
    first turn), and this server's answers so far + 1. Assistant messages it did not write
    (an agent's demonstration turns) do not count."""
    ours = [call_id for m in messages if (call_id := _our_call_id(m))]
    episode = ours[0].removeprefix(_CALL_PREFIX).rsplit("_", 1)[0] if ours else ""
    return episode, len(ours) + 1


def _our_call_id(message: Any) -> str:
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return ""
    calls = message.get("tool_calls") or []
    call_id = str(calls[0].get("id", "")) if calls and isinstance(calls[0], dict) else ""
    return call_id if call_id.startswith(_CALL_PREFIX) else ""


def completion(
    replies: list[Reply], episode: str, turn: int, model: str, token_ids: bool
) -> dict[str, Any]:
    """The chat completion body for `turn` of `episode`."""
    reply = reply_for(replies, turn)
    sampled = reply.token_ids()
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
    if reply.tool:
        message["tool_calls"] = [
            {
                "id": f"{_CALL_PREFIX}{episode}_{turn}",
                "type": "function",
                "function": {"name": reply.tool, "arguments": reply.arguments},
            }
        ]
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "finish_reason": "tool_calls" if reply.tool else "stop",
        "logprobs": {
            "content": [
                {"token": f"token_id:{i}", "logprob": -0.5, "bytes": None, "top_logprobs": []}
                for i in sampled
            ]
        },
    }
    prompt = prompt_ids(replies, turn)
    body: dict[str, Any] = {
        "id": f"chatcmpl-{episode}-{turn}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": len(prompt),
            "completion_tokens": len(sampled),
            "total_tokens": len(prompt) + len(sampled),
        },
    }
    if token_ids:
        choice["token_ids"] = sampled
        body["prompt_token_ids"] = prompt
    return body


@dataclass(frozen=True)
class Served:
    episode: str
    turn: int
    arrived: float  # time.monotonic() when the request was read
    answered: float  # ... when the answer was written


def turn_gaps(served: list[Served]) -> list[float]:
    """Seconds from each answer to the same episode's next request: the platform's own
    time for one turn (tool call in the sandbox, bookkeeping, both HTTP legs), the
    policy's time (answered - arrived) left out."""
    return [gap for gaps in gaps_by_turn(served).values() for gap in gaps]


def gaps_by_turn(served: list[Served]) -> dict[int, list[float]]:
    """`turn_gaps` keyed by the turn whose answer starts the gap (turn 1's gap holds the
    session's first command, which starts its shell)."""
    by_episode: dict[str, dict[int, Served]] = {}
    for record in served:
        by_episode.setdefault(record.episode, {})[record.turn] = record
    gaps: dict[int, list[float]] = {}
    for turns in by_episode.values():
        for turn, record in sorted(turns.items()):
            following = turns.get(turn + 1)
            if following is not None:
                gaps.setdefault(turn, []).append(following.arrived - record.answered)
    return gaps


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), linear between the closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass
class ReplayPolicy:
    """The server, on its own thread and event loop; `served` grows as it answers."""

    replies: list[Reply]
    token: str
    host: str = "127.0.0.1"
    port: int = 0
    token_latency_s: float = 0.0  # per sampled token of an answer
    concurrency: int = 0  # answers at once when token_latency_s is set (0 = no limit)
    publish_latency_s: float = 0.0  # a publish's own time (an engine loading weights)
    served: list[Served] = field(default_factory=list)
    published: dict[str, int] = field(default_factory=dict)  # the publish contract's table
    _slots: asyncio.Semaphore | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _runner: web.AppRunner | None = None
    _thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._complete)
        app.router.add_get("/v1/models", self._models)
        # The inference service's publish contract, so the trainer's replica code can
        # publish to and verify replicas of this (bench/replica_bench.py).
        app.router.add_post(PUBLISH_PATH, self._publish)
        app.router.add_get(PUBLISH_PATH, self._listed)
        app.router.add_post("/v1/completions", self._verify)
        return app

    async def _publish(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"error": {"message": "bad token"}}, status=401)
        message = parse(PublishPolicy, await request.json())
        await asyncio.sleep(self.publish_latency_s)
        self.published[message.name] = message.step
        model = f"{message.name}@{message.step}"
        return web.json_response(
            PublishReply(model=model, seconds=self.publish_latency_s).model_dump()
        )

    async def _listed(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"error": {"message": "bad token"}}, status=401)
        policies = [ServedPolicy(name=n, step=s) for n, s in self.published.items()]
        return web.json_response(ServedPolicies(policies=policies).model_dump())

    async def _verify(self, request: web.Request) -> web.Response:
        """A one-token completion answers under a published `name@step` only."""
        if not self._authorized(request):
            return web.json_response({"error": {"message": "bad token"}}, status=401)
        model = str((await request.json()).get("model", ""))
        name, _, step = model.rpartition("@")
        if not step.isdigit() or self.published.get(name) != int(step):
            return web.json_response({"error": {"message": f"{model} not served"}}, status=404)
        return web.json_response({"model": model, "choices": [{"index": 0, "text": "k"}]})

    def _authorized(self, request: web.Request) -> bool:
        given = request.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode())

    async def _models(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"error": {"message": "bad token"}}, status=401)
        return web.json_response({"object": "list", "data": []})

    async def _complete(self, request: web.Request) -> web.Response:
        arrived = time.monotonic()
        if not self._authorized(request):
            return web.json_response({"error": {"message": "bad token"}}, status=401)
        body = await request.json()
        episode, turn = episode_of(body.get("messages") or [])
        episode = episode or uuid.uuid4().hex[:12]
        if self.token_latency_s > 0:
            await self._generate(len(reply_for(self.replies, turn).token_ids()))
        answer = completion(
            self.replies,
            episode,
            turn,
            str(body.get("model", "")),
            bool(body.get("return_token_ids")),
        )
        response = web.json_response(answer)
        self.served.append(Served(episode, turn, arrived, time.monotonic()))
        return response

    async def _generate(self, tokens: int) -> None:
        """The time an engine would take: tokens x latency, in one of `concurrency` slots."""
        if self._slots is None and self.concurrency > 0:
            self._slots = asyncio.Semaphore(self.concurrency)  # on the server's loop
        if self._slots is None:
            await asyncio.sleep(tokens * self.token_latency_s)
            return
        async with self._slots:
            await asyncio.sleep(tokens * self.token_latency_s)

    def start(self) -> None:
        ready = threading.Event()

        def serve() -> None:
            loop = self._loop = asyncio.new_event_loop()
            self._runner = web.AppRunner(self.app(), access_log=None)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, self.host, self.port)
            loop.run_until_complete(site.start())
            self.port = self._runner.addresses[0][1]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=serve, name="replay-policy", daemon=True)
        self._thread.start()
        if not ready.wait(30):
            raise TimeoutError("the replay policy did not start")

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)


def load_script(path: str) -> list[Reply]:
    if not path:
        return parse_script(DEFAULT_SCRIPT)
    with open(path, encoding="utf-8") as f:
        return parse_script(json.load(f))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8199)
    parser.add_argument("--token", required=True)
    parser.add_argument("--script", default="", help="JSON list of replies (default: built in)")
    parser.add_argument("--token-latency-ms", type=float, default=0.0, help="per sampled token")
    parser.add_argument("--concurrency", type=int, default=0, help="answers at once (0: any)")
    args = parser.parse_args()
    try:
        replies = load_script(args.script)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"replay_policy: {exc}") from None
    if args.token_latency_ms < 0 or args.concurrency < 0:
        raise SystemExit("replay_policy: --token-latency-ms and --concurrency must be >= 0")
    server = ReplayPolicy(
        replies, args.token, args.host, args.port, args.token_latency_ms / 1000, args.concurrency
    )
    web.run_app(server.app(), host=args.host, port=args.port, access_log=None)


if __name__ == "__main__":
    main()
