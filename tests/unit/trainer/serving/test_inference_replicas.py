"""Every inference replica on the same policy (artfleet_trainer.serving.replicas): a publish
reaches each replica in service and counts once each answers the new name; a replica that
fails is quarantined and, once it answers again, gets the current policy back; a restarted
or new replica gets it from the watch loop; a refusal stops the publish. The replicas are
real HTTP servers speaking the publish contract (a small in-process app of our own)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from local_http import serve_app
from prometheus_client import REGISTRY

from artfleet.contracts.checkpoint_layout import is_full_checkpoint
from artfleet.contracts.policy_publish import (
    PUBLISH_PATH,
    RETIRE_PATH,
    PublishPolicy,
    PublishReply,
    RetirePolicy,
    ServedPolicies,
    ServedPolicy,
    parse,
)
from artfleet_trainer.clients.inference_client import InferenceRefused, InferenceUnavailable
from artfleet_trainer.serving.replicas import QUARANTINED, SERVING, InferenceReplicas

TOKEN = "replica-test-token"


@dataclass
class FakeReplica:
    """One replica's publish routes and completions; `mode` says how it misbehaves."""

    url: str = ""
    table: dict[str, int] = field(default_factory=dict)
    publishes: list[str] = field(default_factory=list)
    mode: str = "ok"  # ok | down | refuse | mute (publishes, then does not answer the name)
    full: str = ""  # the full fine-tune whose weights it holds (it serves nothing else)
    runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post(PUBLISH_PATH, self._publish)
        app.router.add_get(PUBLISH_PATH, self._served)
        app.router.add_post(RETIRE_PATH, self._retire)
        app.router.add_post("/v1/completions", self._complete)
        return app

    def _check(self, request: web.Request) -> None:
        assert request.headers["Authorization"] == f"Bearer {TOKEN}"
        if self.mode == "down":
            raise web.HTTPServiceUnavailable()

    async def _publish(self, request: web.Request) -> web.Response:
        self._check(request)
        message = parse(PublishPolicy, await request.json())
        if self.mode == "refuse":
            body = {"error": {"message": "not my base model", "param": "base_model"}}
            return web.json_response(body, status=400)
        if is_full_checkpoint(Path(message.checkpoint)):  # its weights displace the others
            self.table, self.full = {}, message.name
        elif self.full:
            body = {"error": {"message": f"the full fine-tune {self.full} owns the weights"}}
            return web.json_response(body, status=400)
        self.table[message.name] = message.step
        self.publishes.append(f"{message.name}@{message.step}")
        return web.json_response(PublishReply(model=f"{message.name}@{message.step}").model_dump())

    async def _served(self, request: web.Request) -> web.Response:
        self._check(request)
        policies = [ServedPolicy(name=n, step=s) for n, s in self.table.items()]
        return web.json_response(ServedPolicies(policies=policies).model_dump())

    async def _retire(self, request: web.Request) -> web.Response:
        self._check(request)
        message = parse(RetirePolicy, await request.json())
        if self.table.get(message.name) == message.step or message.step is None:
            self.table.pop(message.name, None)
        return web.json_response({"retired": message.name})

    async def _complete(self, request: web.Request) -> web.Response:
        self._check(request)
        model = (await request.json())["model"]
        name, _, step = model.partition("@")
        if self.mode == "mute" or self.table.get(name) != int(step):
            return web.json_response({"error": {"message": "not served"}}, status=404)
        return web.json_response({"model": model, "choices": [{"text": "k"}]})


@pytest.fixture
async def replicas() -> AsyncIterator[list[FakeReplica]]:
    fakes = [FakeReplica(), FakeReplica()]
    for fake in fakes:
        fake.runner, fake.url = await serve_app(fake.app())
    yield fakes
    for fake in fakes:
        assert fake.runner is not None
        await fake.runner.cleanup()


def _pool(fakes: list[FakeReplica]) -> InferenceReplicas:
    return InferenceReplicas(",".join(f.url for f in fakes), TOKEN, probe_s=0.1)


def _message(step: int, name: str = "agent") -> PublishPolicy:
    return PublishPolicy(name=name, step=step, checkpoint=f"/art/{name}/{step}", base_model="b")


async def _states(pool: InferenceReplicas, fakes: list[FakeReplica]) -> list[str]:
    """Each fake's state, in the fakes' order."""
    states = {r.client.url: r.state for r in await pool.replicas()}
    return [states[f.url] for f in fakes]


def _quarantines(url: str) -> float:
    value = REGISTRY.get_sample_value(
        "artfleet_trainer_inference_replica_quarantines_total", {"replica": url}
    )
    return value or 0.0


async def test_a_publish_reaches_every_replica_and_is_verified(
    replicas: list[FakeReplica],
) -> None:
    pool = _pool(replicas)
    assert await pool.publish(_message(1)) == 2
    assert await pool.publish(_message(2)) == 2
    assert [f.publishes for f in replicas] == [["agent@1", "agent@2"]] * 2
    await pool.check_all()  # every replica up to date: the watch loop publishes nothing
    assert [len(f.publishes) for f in replicas] == [2, 2]


async def test_a_failing_replica_is_quarantined_and_gets_the_policy_when_back(
    replicas: list[FakeReplica],
) -> None:
    pool = _pool(replicas)
    good, bad = replicas
    assert await pool.publish(_message(0)) == 2
    bad.mode = "down"
    before = _quarantines(bad.url)
    assert await pool.publish(_message(1)) == 1  # done: one replica serves it
    assert await _states(pool, replicas) == [SERVING, QUARANTINED]
    assert _quarantines(bad.url) == before + 1
    assert await pool.publish(_message(2)) == 1  # a quarantined replica is not waited for
    assert await pool.sampling_url() == good.url  # the trainer samples where it is served
    assert bad.publishes == ["agent@0"]
    await pool.check_all()  # still down: stays out, counted once
    assert _quarantines(bad.url) == before + 1
    bad.mode = "ok"
    await pool.check_all()
    assert bad.publishes == ["agent@0", "agent@2"]  # only the current policy, verified
    assert await _states(pool, replicas) == [SERVING, SERVING]


async def test_a_replica_still_starting_is_waited_for_not_counted(
    replicas: list[FakeReplica],
) -> None:
    pool = _pool(replicas)
    starting = replicas[1]
    starting.mode = "down"
    before = _quarantines(starting.url)
    assert await pool.publish(_message(1)) == 1
    await pool.check_all()
    assert _quarantines(starting.url) == before  # it never answered: no quarantine counted
    starting.mode = "ok"
    await pool.check_all()
    assert starting.table == {"agent": 1}
    assert await _states(pool, replicas) == [SERVING, SERVING]


async def test_a_replica_that_publishes_but_does_not_answer_is_quarantined(
    replicas: list[FakeReplica],
) -> None:
    pool = _pool(replicas)
    replicas[1].mode = "mute"
    assert await pool.publish(_message(1)) == 1
    assert await _states(pool, replicas) == [SERVING, QUARANTINED]


async def test_a_restarted_replica_gets_the_current_policy_again(
    replicas: list[FakeReplica],
) -> None:
    pool = _pool(replicas)
    await pool.publish(_message(3))
    await pool.publish(_message(1, name="other"))
    replicas[0].table.clear()  # a restart: its table is empty, nothing failed yet
    await pool.check_all()
    assert replicas[0].table == {"agent": 3, "other": 1}
    assert await _states(pool, replicas) == [SERVING, SERVING]


async def test_no_replica_serving_is_unavailable_and_a_refusal_is_raised(
    replicas: list[FakeReplica],
) -> None:
    pool = _pool(replicas)
    for fake in replicas:
        fake.mode = "down"
    with pytest.raises(InferenceUnavailable, match="no inference replica serves agent@1"):
        await pool.publish(_message(1))
    for fake in replicas:
        fake.mode = "refuse"  # back, but serving another base model
    await pool.check_all()  # the current policy refused: they stay out
    assert await _states(pool, replicas) == [QUARANTINED, QUARANTINED]
    with pytest.raises(InferenceRefused, match="not my base model"):
        await _pool(replicas).publish(_message(2))  # a refusal stops the publish


async def test_a_new_replica_behind_the_name_gets_the_policy(
    replicas: list[FakeReplica],
) -> None:
    first, second = replicas
    addresses = {"svc": [first.url]}

    async def resolve(url: str) -> list[str]:
        assert url == "http://inference:8000"
        return addresses["svc"]

    pool = InferenceReplicas("http://inference:8000", TOKEN, resolve=resolve)
    assert await pool.publish(_message(4)) == 1
    addresses["svc"].append(second.url)  # scaled up
    await pool.check_all()
    assert second.table == {"agent": 4}
    assert len(await pool.replicas()) == 2
    await pool.retire("agent", 4)
    assert first.table == {} and second.table == {}


async def test_with_none_in_service_a_publish_tries_every_replica(
    replicas: list[FakeReplica],
) -> None:
    pool = _pool(replicas)
    for fake in replicas:
        fake.mode = "down"  # e.g. every replica still starting when a job registers
    await pool.check_all()
    assert await _states(pool, replicas) == [QUARANTINED, QUARANTINED]
    for fake in replicas:
        fake.mode = "ok"
    assert await pool.publish(_message(1)) == 2  # no watch round needed first
    assert await _states(pool, replicas) == [SERVING, SERVING]


async def test_a_full_fine_tune_displaces_the_policies_before_it_without_quarantines(
    replicas: list[FakeReplica], tmp_path: Path
) -> None:
    """Its weights are the replicas' own: the LoRA policy published before it is served
    no more, so the watch loop does not publish it again (a refusal would quarantine
    every replica), and a LoRA published after it is refused."""
    pool = _pool(replicas)
    await pool.publish(_message(1, "lora"))
    full = tmp_path / "ft" / "0001"
    full.mkdir(parents=True)
    (full / "config.json").write_text("{}")
    message = PublishPolicy(name="ft", step=1, checkpoint=str(full), base_model="b")
    assert await pool.publish(message) == 2
    before = [_quarantines(f.url) for f in replicas]
    await pool.check_all()
    assert await _states(pool, replicas) == [SERVING, SERVING]
    assert [_quarantines(f.url) for f in replicas] == before
    assert [f.table for f in replicas] == [{"ft": 1}, {"ft": 1}]
    with pytest.raises(InferenceRefused, match="owns the weights"):
        await pool.publish(_message(2, "lora"))
