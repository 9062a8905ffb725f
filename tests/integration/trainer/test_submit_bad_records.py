"""A job over a data file with bad records, submitted through the real path: the CLI and the
HTTP API, the trainer's servicer, the rollout's servicer loading the JSONL file (its
DescribeEnvironment), the reward service's, on one gRPC server, with a real Redis. The file
is refused naming its bad line (INVALID_ARGUMENT: CLI exit 2, HTTP 422 on
`spec.environment`), never as a trainer that cannot be reached; `skip_bad_records` takes it,
and the job's events say what was left out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from submit_fleet import api_client, submit_server, submit_target
from typer.testing import CliRunner, Result

from artfleet.v1 import common_pb2 as pb
from artfleet_cli.main import app
from artfleet_trainer.clients.reward_client import RewardClient
from artfleet_trainer.clients.rollouts import RolloutClient
from artfleet_trainer.jobs.store import JobStore
from artfleet_trainer.servicer import TrainerServicer

pytestmark = pytest.mark.integration
TOKEN = "bad-records-token"
LINES = ['{"prompt": "one"}', '{"prompt": "two"}', '{"prompt": "three",}', '{"prompt": "4"}']


@pytest.fixture
async def fleet(redis_url: str, tmp_path: Path) -> AsyncIterator[tuple[str, JobStore]]:
    client = aioredis.from_url(redis_url)
    await client.flushdb()
    store = JobStore(client)
    target = submit_target()
    trainer = TrainerServicer(
        store, RolloutClient(target, TOKEN), RewardClient(target, TOKEN), lambda backend: ""
    )
    server = submit_server(target, TOKEN, trainer, "bad-records-test")
    await server.start()
    try:
        yield target, store
    finally:
        await server.stop(1)
        await client.aclose()


async def _submit(target: str, *args: str) -> Result:
    """The CLI in a thread: the servers it calls run on this test's event loop."""
    env = {"ARTFLEET_API_TOKEN": TOKEN, "COLUMNS": "300"}
    argv = ["jobs", "submit", "--target", target, *args]
    return await asyncio.to_thread(CliRunner().invoke, app, argv, env=env)


def _text(result: Result) -> str:
    return " ".join(result.stderr.split())


async def test_a_bad_line_is_named_and_the_job_refused(
    fleet: tuple[str, JobStore], tmp_path: Path
) -> None:
    target, store = fleet
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    result = await _submit(target, "--env", f"jsonl:{path}")
    assert result.exit_code == 2, result.output  # not 1: the trainer was reached
    assert _text(result).startswith(
        f"error: INVALID_ARGUMENT: environment: 1 bad record: {path}:3: not valid JSON"
    )
    assert "skip_bad_records: true" in _text(result) and "Traceback" not in result.output
    # A JSON array that does not parse fails whole, at its line, and is as much the
    # submitter's to fix (it was an internal error, then "cannot reach the trainer").
    array = tmp_path / "prompts.json"
    array.write_text('[{"prompt": "one"},\n {"prompt": "two",}]')
    result = await _submit(target, "--env", f"jsonl:{array}")
    assert result.exit_code == 2, result.output
    assert f"INVALID_ARGUMENT: environment: {array}:2: not valid JSON" in _text(result)
    assert await store.list() == []


async def test_the_http_api_answers_422_naming_the_field(
    fleet: tuple[str, JobStore], tmp_path: Path
) -> None:
    target, _ = fleet
    path = tmp_path / "prompts.jsonl"
    path.write_bytes(b'{"prompt": "one"}\n{"prompt": "caf\xe9"}\n')
    async with api_client(target, TOKEN, tmp_path) as client:
        reply = await client.post("/train", json={"spec": {"environment": f"jsonl:{path}"}})
    assert reply.status_code == 422, reply.text
    body: dict[str, Any] = reply.json()
    assert body["field"] == "spec.environment"
    assert f"1 bad record: {path}:2: not UTF-8" in body["error"]


async def test_skip_bad_records_takes_the_good_ones_and_says_what_it_left_out(
    fleet: tuple[str, JobStore], tmp_path: Path
) -> None:
    target, store = fleet
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(LINES))
    result = await _submit(target, "--env", f"jsonl:{path}", "--skip-bad-records")
    assert result.exit_code == 0, result.output
    (job,) = await store.list()
    assert job.spec.skip_bad_records
    assert await asyncio.wait_for(_first_log(store, job.id), 30) == (
        f"environment jsonl:{path}: left out 1 bad record: {path}:3: not valid JSON "
        "(Expecting property name enclosed in double quotes at column 20)"
    )


async def _first_log(store: JobStore, job_id: str) -> str:
    """The job's first log event (`jobs watch` prints it); the queued job never ends here."""
    async for event in store.events(job_id, block_ms=100):
        if event.kind == pb.EVENT_KIND_LOG:
            return event.message
    raise AssertionError("the job's events ended without a log event")
