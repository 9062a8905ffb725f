"""Policy calls over several inference replicas (artfleet_rollout.policy_routing): least
loaded, an episode kept on its replica, failover when a replica is gone or does not serve
the policy, and PolicyUnavailable only when none answers. Each replica is an in-process
HTTP transport answering as vLLM does."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from openai import APIStatusError, AsyncOpenAI
from pydantic import SecretStr

from artfleet.clients.replicas import Resolved
from artfleet.v1 import rollout_pb2
from artfleet_rollout import metrics, policy_routing
from artfleet_rollout.adapters import OpenAIClients, OpenAIPolicy
from artfleet_rollout.policy_routing import PolicyReplicas, replica_label
from artfleet_rollout.ports import PolicyUnavailable
from artfleet_rollout.settings import RolloutSettings

A, B = "http://10.0.0.1:8000/v1", "http://10.0.0.2:8000/v1"
HI = [{"role": "user", "content": "hi"}]

Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]


def answer(model: str = "agent@3") -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "ok"},
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        },
    )


class Fleet(PolicyReplicas):
    """Replicas whose clients are in-process transports; `down` refuse connections,
    `status` answer that status; every request is recorded by replica."""

    def __init__(self, base_url: str = f"{A},{B}", rounds: int = 1) -> None:
        super().__init__(base_url, "k", rounds=rounds, refresh_s=60, avoid_s=60)
        self.down: set[str] = set()
        self.status: dict[str, int] = {}
        self.seen: list[str] = []
        self.hold: asyncio.Event | None = None
        self.all_held = asyncio.Event()  # `held` requests are waiting on `hold`
        self.held = 0

    def client(self, url: str) -> AsyncOpenAI:
        if url not in self._clients:
            self._clients[url] = self._transport_client(url)
        return self._clients[url]

    def _transport_client(self, url: str) -> AsyncOpenAI:
        async def endpoint(request: httpx.Request) -> httpx.Response:
            self.seen.append(url)
            if url in self.down:
                raise httpx.ConnectError("connection refused", request=request)
            if url in self.status:
                return httpx.Response(self.status[url], json={"message": "no such model"})
            if self.hold is not None:
                self.held -= 1
                if not self.held:
                    self.all_held.set()
                await self.hold.wait()
            return answer()

        return AsyncOpenAI(
            base_url=url,
            api_key="k",
            max_retries=0,
            http_client=httpx.AsyncClient(transport=httpx.MockTransport(endpoint)),
        )


def policy(fleet: PolicyReplicas, episode: str = "") -> OpenAIPolicy:
    unbound = OpenAIPolicy(fleet, model="agent@3", temperature=1.0, max_tokens=8, timeout_s=5)
    return unbound.for_episode(episode) if episode else unbound


def counted(metric: Any, url: str) -> float:
    return float(metric.labels(replica_label(url))._value.get())


async def test_new_episodes_go_to_the_least_loaded_replica() -> None:
    fleet = Fleet()
    fleet.hold, fleet.held = asyncio.Event(), 4
    calls = [asyncio.create_task(policy(fleet, f"e{i}").complete(HI)) for i in range(4)]
    await fleet.all_held.wait()
    assert sorted(fleet.seen) == [A, A, B, B]
    assert fleet.choice.in_flight(A) == fleet.choice.in_flight(B) == 2
    fleet.hold.set()
    await asyncio.gather(*calls)
    assert fleet.choice.in_flight(A) == fleet.choice.in_flight(B) == 0


async def test_an_episodes_turns_stay_on_its_replica() -> None:
    fleet = Fleet()
    one, other = policy(fleet, "g/0"), policy(fleet, "g/1")
    for _ in range(3):
        await one.complete(HI)
        await other.complete(HI)
    assert fleet.seen[0::2] == [fleet.seen[0]] * 3  # g/0's turns
    assert fleet.seen[1::2] == [fleet.seen[1]] * 3  # g/1's turns
    assert fleet.seen[0] != fleet.seen[1]


@pytest.mark.parametrize("gone", ["refused", 502, 503, 504, 404])
async def test_an_episode_whose_replica_goes_away_goes_on_on_another(gone: str | int) -> None:
    fleet = Fleet()
    episode = policy(fleet, "g/0")
    turn = await episode.complete(HI)
    first = fleet.seen[-1]
    second = B if first == A else A
    failovers = counted(metrics.POLICY_FAILOVERS, first)
    if gone == "refused":
        fleet.down.add(first)
    else:
        fleet.status[first] = int(gone)
    turn = await episode.complete(HI)  # the turn is answered: no failure, no outage
    assert turn.policy_version == 3
    assert fleet.seen[-2:] == [first, second]
    assert counted(metrics.POLICY_FAILOVERS, first) == failovers + 1
    await episode.complete(HI)
    assert fleet.seen[-1] == second  # pinned to the replica that answered


async def test_no_replica_answering_is_a_policy_outage_after_every_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(policy_routing, "_pause", lambda round_: 0.0)
    fleet = Fleet(rounds=3)
    fleet.down |= {A, B}
    with pytest.raises(PolicyUnavailable, match="no replica answered"):
        await policy(fleet, "g/0").complete(HI)
    assert sorted(fleet.seen) == [A, A, A, B, B, B]


async def test_a_replica_back_within_the_rounds_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    pauses: list[int] = []

    def pause(round_: int) -> float:
        pauses.append(round_)
        fleet.down.discard(B)  # B restarted meanwhile
        return 0.0

    monkeypatch.setattr(policy_routing, "_pause", pause)
    fleet = Fleet(rounds=3)
    fleet.down |= {A, B}
    await policy(fleet, "g/0").complete(HI)
    assert pauses == [1] and fleet.seen[-1] == B


async def test_no_replica_serving_the_model_fails_the_call_without_waiting() -> None:
    fleet = Fleet(rounds=5)
    fleet.status.update({A: 404, B: 404})
    with pytest.raises(APIStatusError) as info:
        await policy(fleet).complete(HI)
    assert info.value.status_code == 404
    assert sorted(fleet.seen) == [A, B]  # one round: waiting would change nothing


async def test_a_request_the_replica_refuses_is_not_sent_elsewhere() -> None:
    fleet = Fleet()
    fleet.status.update({A: 400, B: 400})
    with pytest.raises(APIStatusError):
        await policy(fleet).complete(HI)
    assert len(fleet.seen) == 1


async def test_requests_are_counted_per_replica() -> None:
    fleet = Fleet(base_url=A)
    before = counted(metrics.POLICY_REQUESTS, A)
    await policy(fleet).complete(HI)
    assert counted(metrics.POLICY_REQUESTS, A) == before + 1
    assert counted(metrics.POLICY_IN_FLIGHT, A) == 0


async def test_clients_share_the_replicas_of_an_endpoint_and_key() -> None:
    clients = OpenAIClients(RolloutSettings(api_token=SecretStr("t0k3n-for-tests")))
    task = rollout_pb2.GroupTask(model_base_url=f"{A},{B}", policy="p@1", max_tokens=8)
    one = clients.policy(task, "k1")
    assert clients.policy(task, "k1")._replicas is one._replicas
    assert clients.policy(task, "k2")._replicas is not one._replicas
    assert await one._replicas.replicas() == [A, B]
    bound = one.for_episode("g/0")
    assert bound._replicas is one._replicas and bound._episode == "g/0" and not one._episode
    await clients.close()


async def test_the_replica_set_is_refreshed_and_a_gone_replicas_client_closed() -> None:
    c = "http://10.0.0.3:8000/v1"
    sets = [[A], [c]]
    fleet = Fleet()

    async def resolve() -> list[str]:
        return sets.pop(0) if len(sets) > 1 else sets[0]

    fleet._resolved = Resolved(resolve, refresh_s=3600)
    episode = policy(fleet, "g/0")
    await episode.complete(HI)
    gone = fleet._clients[A]
    fleet._resolved.stale()  # as after a failure, or once refresh_s has passed
    await episode.complete(HI)
    assert fleet.seen == [A, c]  # the episode's replica left the set: it moved
    assert A not in fleet._clients and gone.is_closed()
