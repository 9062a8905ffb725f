"""The product's side of the ports: OpenAI-compatible policies, gRPC sandbox workspaces and
the gRPC reward client. Channels and clients belong to the event loop that `connect` ran on
and are reused by every group until `Connections.close`."""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
import os
import socket
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import grpc
import httpx
import openai.resources  # noqa: F401  (else the SDK imports it at a client's first call, on the loop)
from openai import (
    APIConnectionError,
    APIStatusError,
    AsyncOpenAI,
    BadRequestError,
    DefaultAsyncHttpxClient,
)

from artfleet.clients.replicas import resolve_urls
from artfleet.clients.sandbox import (
    SandboxRouter,
    SandboxSession,
    describe,
    is_replica_lost,
    is_session_gone,
)
from artfleet.contracts import seeds
from artfleet.contracts.sampling import Sampling
from artfleet.runtime.rpc.client import aio_channel
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import reward_pb2, reward_pb2_grpc, rollout_pb2, sandbox_pb2
from artfleet_rollout import metrics
from artfleet_rollout.policy_routing import PolicyReplicas, describe_api_error
from artfleet_rollout.ports import (
    Connections,
    ContextOverflow,
    EncodedList,
    PolicyTurn,
    SuiteRun,
    Usage,
    WorkspaceLost,
    WorkspaceSpec,
    encode,
)
from artfleet_rollout.settings import RolloutSettings

# vLLM (and the built-in server) answer the exact token ids when asked: ART after 0.5.18
# trains on them instead of re-tokenizing the text.
log = logging.getLogger(__name__)

_TOKEN_IDS_BODY = {"return_token_ids": True}
_RPC_SLACK_S = 30.0  # the sandbox enforces the command's own limit; this bounds the call
_CREATE_DEADLINE_S = 120.0
_SCORE_DEADLINE_S = 600.0
_SCORE_RETRY_S = 180.0  # a reward replica restarting: its compose restart, its imports
_PROBE_TIMEOUT_S = 10.0


# ---------------------------------------------------------------- policy
class OpenAIPolicy:
    """The task's policy, bound to one episode (`for_episode`): its calls go to the
    replica that holds its prefix, and on to another when that one is gone
    (`policy_routing.PolicyReplicas`), each with the seed of its place in the episode
    (`seeds.call_seed`; retries of one call send the same). A bare client is one fixed
    endpoint."""

    def __init__(
        self,
        replicas: PolicyReplicas | AsyncOpenAI,
        *,
        model: str,
        temperature: float,
        max_tokens: int,
        timeout_s: float,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        episode: str = "",
    ) -> None:
        if isinstance(replicas, AsyncOpenAI):
            replicas = PolicyReplicas.fixed(replicas)
        self._replicas = replicas
        self._episode = episode
        self._model = model
        # The full distribution at the job's temperature, explicitly (contracts/sampling.py).
        self._sampling = Sampling(temperature=temperature)
        self._max_tokens = max_tokens
        self._timeout_s = timeout_s
        self._template_kwargs = dict(chat_template_kwargs or {})
        self._seed: int | None = None  # the rollout's: each call sends its own from it
        self._calls = 0

    def for_episode(self, key: str, seed: int | None = None) -> OpenAIPolicy:
        bound = copy.copy(self)
        bound._episode, bound._seed, bound._calls = key, seed, 0
        return bound

    def _next_seed(self) -> int | None:
        if self._seed is None:
            return None
        seed = seeds.call_seed(self._seed, self._calls)
        self._calls += 1
        return seed

    async def complete(
        self,
        messages: Sequence[Any],
        *,
        tools: Sequence[Any] | None = None,
        tool_choice: Any = None,
        max_tokens: int | None = None,
    ) -> PolicyTurn:
        started = time.perf_counter()
        limit = self._max_tokens if max_tokens is None else min(max_tokens, self._max_tokens)
        body = self._body(messages, tools, tool_choice, self._next_seed(), limit)
        metrics.POLICY_REQUEST_SECONDS.observe(time.perf_counter() - started)
        try:
            # Connection errors and outage statuses on every replica raise PolicyUnavailable.
            completion = await self._replicas.post(
                body, episode=self._episode, timeout_s=self._timeout_s
            )
        except BadRequestError as exc:
            if is_context_overflow(exc):
                raise ContextOverflow(describe_api_error(exc)) from exc
            raise
        if not completion.choices:
            raise RuntimeError(f"the policy {self._model!r} answered no choice")
        choice = completion.choices[0]
        prompt_ids = (completion.model_extra or {}).get("prompt_token_ids")
        if prompt_ids is not None:
            # Where ART >= 0.5.20 reads it: the choice's extra fields (as vLLM's per-choice
            # `token_ids` already are).
            setattr(choice, "prompt_token_ids", list(prompt_ids))  # noqa: B010
        usage = completion.usage
        return PolicyTurn(
            choice,
            Usage(usage.prompt_tokens, usage.completion_tokens) if usage else None,
            served_version(completion.model),
        )

    def _body(
        self,
        messages: Sequence[Any],
        tools: Sequence[Any] | None,
        tool_choice: Any,
        seed: int | None = None,
        max_tokens: int | None = None,
    ) -> bytes:
        """The JSON `chat.completions.create` would send, built without its request
        transform: that walks every message of the history against the SDK's TypedDicts on
        each call (a cost that grows with the history) and changes nothing in JSON
        messages. Messages and tools that come encoded (`ports.EncodedList`: an episode's
        history, encoded once per message) are joined, not encoded again, so a turn costs
        its new messages. Retries, auth, timeout and the answer's parsing stay the
        client's."""
        parts = [b'{"messages":', _json_array(messages)]
        if tools:
            parts += [b',"tools":', _json_array(tools)]
        rest = encode(self._settings_body(tools, tool_choice, seed, max_tokens))
        return b"".join([*parts, b",", rest[1:]])  # rest: the other fields, past its "{"

    def _settings_body(
        self,
        tools: Sequence[Any] | None,
        tool_choice: Any,
        seed: int | None,
        max_tokens: int | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self._model,
            "logprobs": True,
            "max_tokens": self._max_tokens if max_tokens is None else max_tokens,
            **self._sampling.request_fields(),
        }
        if seed is not None:  # OpenAI's field: vLLM and the torch server seed the sampling
            body["seed"] = seed
        if tools and tool_choice is not None:
            body["tool_choice"] = tool_choice
        if self._template_kwargs:
            # vLLM's extension (the torch server takes it too): variables of the chat
            # template, e.g. Qwen3's enable_thinking. Never `include_reasoning: false`: with
            # a reasoning parser vLLM then drops the token ids and logprobs training needs.
            body["chat_template_kwargs"] = dict(self._template_kwargs)
        body.update(_TOKEN_IDS_BODY)
        return body


# How engines word a prompt past the model's context: OpenAI's and the torch server's
# code, vLLM's messages (0.32: "This model's maximum context length is N tokens. However,
# your prompt contains ..."; "The decoder prompt (length N) is longer than the maximum
# model length of M").
_CONTEXT_CODE = "context_length_exceeded"
_CONTEXT_WORDS = ("maximum context length", "maximum model length")


def is_context_overflow(exc: BadRequestError) -> bool:
    """A 400 for a conversation that no longer fits the model's context."""
    body: dict[str, Any] = exc.body if isinstance(exc.body, dict) else {}
    inner = body.get("error")
    error: dict[str, Any] = inner if isinstance(inner, dict) else body
    if exc.code == _CONTEXT_CODE or error.get("code") == _CONTEXT_CODE:
        return True
    said = describe_api_error(exc).lower()
    return any(words in said for words in _CONTEXT_WORDS)


def _json_array(values: Sequence[Any]) -> bytes:
    """`values` as a JSON array, from their own JSON texts where they carry them."""
    if isinstance(values, EncodedList) and len(values.encoded) == len(values):
        return b"[" + b",".join(values.encoded) + b"]"
    return b"[" + b",".join(encode(value) for value in values) + b"]"


def template_kwargs(task: rollout_pb2.GroupTask) -> dict[str, Any]:
    """The chat template variables a task sets: `enable_thinking` only when the job set it
    (unset keeps the template's default, and endpoints without the extension see nothing)."""
    if task.HasField("enable_thinking"):
        return {"enable_thinking": task.enable_thinking}
    return {}


def served_version(model: str | None) -> int | None:
    """The step of a served `name@step` (the torch server and vLLM name the adapter that
    answered so); None for any other name."""
    _, at, step = (model or "").rpartition("@")
    return int(step) if at and step.isdigit() else None


class OpenAIClients:
    """The replicas of each (base URL, key), kept across groups (`PolicyReplicas`)."""

    def __init__(self, settings: RolloutSettings) -> None:
        self._settings = settings
        self._replicas: dict[tuple[str, str], PolicyReplicas] = {}

    def replicas(self, base_url: str, api_key: str) -> PolicyReplicas:
        key = (base_url, api_key)
        replicas = self._replicas.get(key)
        if replicas is None:
            settings = self._settings
            # Rounds over every replica with backoff between them ride out a restart (a
            # trainer's torch server, a vLLM replica) instead of failing every episode.
            replicas = PolicyReplicas(
                base_url,
                api_key,
                rounds=settings.model_retries + 1,
                refresh_s=settings.policy_refresh_s,
                avoid_s=settings.policy_refresh_s,
            )
            self._replicas[key] = replicas
        return replicas

    def policy(self, task: rollout_pb2.GroupTask, api_key: str) -> OpenAIPolicy:
        return OpenAIPolicy(
            self.replicas(task.model_base_url, api_key),
            model=task.policy,
            temperature=task.temperature,
            max_tokens=task.max_tokens,
            timeout_s=self._settings.model_timeout_s,
            chat_template_kwargs=template_kwargs(task),
        )

    async def served(self, task: rollout_pb2.GroupTask, api_key: str) -> str | None:
        return await policy_served(task.model_base_url, task.policy, api_key)

    async def close(self) -> None:
        replicas, self._replicas = list(self._replicas.values()), {}
        await asyncio.gather(*(r.close() for r in replicas), return_exceptions=True)


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """The TLS context every probe's client shares. httpx reads the CA bundle into a new
    one for each client it makes (costly CPU work, more so on a busy host), on the event
    loop: with a probe every few seconds, that stalled every episode's turns."""
    return httpx.create_ssl_context()


async def check_policy(
    base_url: str, model: str, api_key: str, timeout_s: float
) -> rollout_pb2.CheckPolicyResponse:
    """Whether the replicas behind `base_url` answer, take the key and serve `model`: the
    first replica's answer that serves it (the rollout routes around the others), else
    the first answer (every replica asked at once)."""
    urls = await resolve_urls(base_url)
    checks = [asyncio.ensure_future(check_replica(u, model, api_key, timeout_s)) for u in urls]
    try:
        for done in asyncio.as_completed(checks):
            answer = await done
            if answer.served:
                return answer
    finally:
        for check in checks:
            check.cancel()
        await asyncio.gather(*checks, return_exceptions=True)
    return checks[0].result()


async def check_replica(
    base_url: str, model: str, api_key: str, timeout_s: float
) -> rollout_pb2.CheckPolicyResponse:
    """Whether `base_url` answers, takes the key and serves `model`: its model list, then
    a one-token request (an endpoint may serve checkpoints it does not list)."""
    answer = rollout_pb2.CheckPolicyResponse()
    async with AsyncOpenAI(
        base_url=base_url,
        api_key=api_key,
        max_retries=0,
        timeout=timeout_s,
        http_client=DefaultAsyncHttpxClient(verify=_ssl_context()),
    ) as client:
        try:
            listed = await client.models.list()
            answer.models.extend(sorted(m.id for m in listed.data))
            answer.reachable = answer.authorized = True
            if model in answer.models:
                answer.served = True
                answer.served_as = model
                return answer
            reply = await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=1
            )
            answer.served = True
            answer.served_as = reply.model or ""
        except APIConnectionError as exc:  # includes timeouts
            answer.error = describe_api_error(exc)
        except APIStatusError as exc:
            answer.reachable = True
            answer.authorized = exc.status_code not in (401, 403)
            answer.error = describe_api_error(exc)
    return answer


async def policy_served(base_url: str, model: str, api_key: str) -> str | None:
    """None when a replica behind `base_url` serves `model` now; else why not (a policy
    outage's probe)."""
    answer = await check_policy(base_url, model, api_key, timeout_s=_PROBE_TIMEOUT_S)
    return None if answer.served else (answer.error or "not served")


# ---------------------------------------------------------------- workspace
class GrpcWorkspace:
    """A sandbox session; every call goes to the replica that holds it.

    The first call that finds the session gone (its replica is down, or answers that it
    no longer holds it) counts the session as lost (`failures_total{kind="sandbox_lost"}`,
    once per session), so a replica's death is counted for every session an episode still
    held, at its next call at the latest: `close`, always made. Every call but `close`
    then raises WorkspaceLost; `close` returns (nothing is left to close): an episode that
    was done before its close met the dead replica keeps its result."""

    def __init__(self, session: SandboxSession) -> None:
        self._session = session
        self._id = session.session_id
        self._lost = ""
        self._closed = False
        metrics.SANDBOX_SESSIONS.labels(session.address).inc()

    def _mark_lost(self, why: str) -> WorkspaceLost:
        if not self._lost:
            self._lost = f"sandbox session {self._id} lost: {why}"
            metrics.FAILURES.labels("sandbox_lost").inc()
        return WorkspaceLost(self._lost)

    @asynccontextmanager
    async def _lost_replica(self) -> AsyncIterator[None]:
        """A call that failed because the replica is gone becomes WorkspaceLost."""
        if self._lost:
            raise WorkspaceLost(self._lost)
        try:
            yield
        except grpc.aio.AioRpcError as exc:
            # Closed behind the episode's back (its owner lease ran out while this worker
            # was cut off from the replica): as lost as with a dead replica.
            if not (is_replica_lost(exc) or is_session_gone(exc)):
                raise
            raise self._mark_lost(describe(exc)) from exc

    async def exec(self, command: str, *, timeout_s: float) -> sandbox_pb2.ExecResult:
        request = sandbox_pb2.ExecRequest(session_id=self._id, command=command, timeout_s=timeout_s)
        async with self._lost_replica():
            result: sandbox_pb2.ExecResult = await self._session.stub.Exec(
                request, timeout=timeout_s + _RPC_SLACK_S
            )
        return result

    async def write_files(self, files: Mapping[str, str | bytes]) -> None:
        request = sandbox_pb2.WriteFilesRequest(session_id=self._id, files=_files(files))
        async with self._lost_replica():
            await self._session.stub.WriteFiles(request, timeout=_RPC_SLACK_S)

    async def read_file(self, path: str, *, max_bytes: int = 0) -> bytes:
        request = sandbox_pb2.ReadFileRequest(session_id=self._id, path=path, max_bytes=max_bytes)
        async with self._lost_replica():
            reply = await self._session.stub.ReadFile(request, timeout=_RPC_SLACK_S)
        return bytes(reply.content)

    async def run_tests(self, command: str = "", *, timeout_s: float) -> SuiteRun:
        request = sandbox_pb2.RunTestsRequest(
            session_id=self._id, command=command, timeout_s=timeout_s
        )
        async with self._lost_replica():
            r = await self._session.stub.RunTests(request, timeout=timeout_s + _RPC_SLACK_S)
        cases = {case.name: case.outcome for case in r.tests}
        return SuiteRun(
            r.passed, r.failed, r.errored, r.total, r.exit_code, r.timed_out, r.output, cases
        )

    async def check(self, command: str, *, timeout_s: float) -> bool:
        result = await self.exec(command, timeout_s=timeout_s)
        return result.exit_code == 0 and not result.timed_out

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            # Also for a session found lost: an UNAVAILABLE may have been a moment's.
            closed = await self._session.close()
        except grpc.aio.AioRpcError as exc:
            if self._lost:
                return  # counted already; the episode's own error matters, not this one
            if not is_replica_lost(exc):
                raise
            self._mark_lost(describe(exc))  # counted; nothing left to close
        else:
            if not closed:
                # Closing is idempotent: a replica that restarted (or a reaper) answers
                # "not open" for a session this episode still held.
                self._mark_lost("it was no longer open when the episode closed it")
        finally:
            metrics.SANDBOX_SESSIONS.labels(self._session.address).dec()


def _files(files: Mapping[str, str | bytes]) -> list[sandbox_pb2.File]:
    return [
        sandbox_pb2.File(
            path=path, content=content.encode() if isinstance(content, str) else content
        )
        for path, content in files.items()
    ]


class GrpcWorkspaces:
    def __init__(self, router: SandboxRouter) -> None:
        self._router = router

    async def open(self, spec: WorkspaceSpec) -> GrpcWorkspace:
        request = sandbox_pb2.CreateSessionRequest(
            image=spec.image, network=spec.network, job_id=spec.job_id, files=_files(spec.files)
        )
        if spec.repo_path:
            request.repo.path, request.repo.commit = spec.repo_path, spec.repo_commit
        try:
            session = await self._router.create_session(request, deadline_s=_CREATE_DEADLINE_S)
        except grpc.aio.AioRpcError as exc:
            if not is_replica_lost(exc):
                raise
            metrics.FAILURES.labels("sandbox_unavailable").inc()
            raise WorkspaceLost(f"no sandbox replica took the session: {describe(exc)}") from exc
        return GrpcWorkspace(session)


# ---------------------------------------------------------------- reward
class GrpcRewardClient:
    """ScoreGroup, retried while the reward service is unreachable (a replica restarting):
    scoring is stateless and idempotent, and a group that failed on a restart would lose
    every trajectory it ran."""

    def __init__(self, channel: grpc.aio.Channel, retry_s: float = _SCORE_RETRY_S) -> None:
        self._stub = reward_pb2_grpc.RewardStub(channel)
        self._retry_s = retry_s

    async def score(
        self, group: pb.TrajectoryGroup, episodes: Sequence[pb.Episode], spec: pb.RewardSpec
    ) -> reward_pb2.ScoreGroupResponse:
        request = reward_pb2.ScoreGroupRequest(group=group, episodes=episodes, spec=spec)
        give_up = time.monotonic() + self._retry_s
        pause = 0.5
        while True:
            try:
                reply: reward_pb2.ScoreGroupResponse = await self._stub.ScoreGroup(
                    request, timeout=_SCORE_DEADLINE_S, wait_for_ready=pause > 0.5
                )
                return reply
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > give_up:
                    raise
                metrics.FAILURES.labels("reward_unavailable").inc()
                log.warning("reward service unavailable (%s); scoring again", describe(exc))
            await asyncio.sleep(pause)
            pause = min(pause * 2, 5.0)


# ---------------------------------------------------------------- all three
async def connect(settings: RolloutSettings) -> Connections:
    """Opens the fleet's connections on the running loop (channels are per loop)."""
    token = settings.api_token.get_secret_value()
    # One owner per process start: its sandbox sessions go within a lease when it dies.
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    router = SandboxRouter(
        settings.sandbox_target, token, owner=owner, lease_s=settings.sandbox_lease_s
    )
    channel = aio_channel(settings.reward_target, token)
    clients = OpenAIClients(settings)

    async def close() -> None:
        await asyncio.gather(
            clients.close(), router.close(), channel.close(), return_exceptions=True
        )

    return Connections(clients, GrpcWorkspaces(router), GrpcRewardClient(channel), close)
