"""The inference front's trainer routes speak the kernel's publish contract: a bad field is
a 400 naming it (never a traceback), and GET lists what this replica serves."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from local_http import serve_app
from lora_files import write_adapter, write_full

from artfleet.contracts.policy_publish import PUBLISH_PATH, RETIRE_PATH, ServedPolicies, parse
from artfleet_inference.engine import PolicyEngine
from artfleet_inference.policies import PolicyTable
from artfleet_inference.server import Front

TOKEN = "fleet-token-for-tests"


@pytest.fixture
async def front(tmp_path: Path) -> AsyncIterator[str]:
    table = PolicyTable("base", "lora", lambda name, step: None)
    table.publish("agent", 3, tmp_path / "ckpt")
    engine = PolicyEngine(table, "http://127.0.0.1:9", "key", tmp_path, tmp_path / "work")
    runner, url = await serve_app(Front(engine, TOKEN, tmp_path, lambda: True).app)
    yield url
    await runner.cleanup()


async def _call(url: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, f"{url}{path}", json=body, headers=headers) as reply,
    ):
        return reply.status, await reply.json()


async def test_served_policies_are_listed(front: str) -> None:
    status, body = await _call(front, "GET", PUBLISH_PATH)
    assert status == 200
    assert parse(ServedPolicies, body).step_of("agent") == 3


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"name": "agent", "step": -1, "checkpoint": "/x"}, "step"),
        ({"name": "agent", "step": "1", "checkpoint": "/x"}, "step"),
        ({"name": "../etc", "step": 1, "checkpoint": "/x"}, "name"),
        ({"name": "agent", "step": 1}, "checkpoint"),
        ({"name": "agent", "step": 1, "checkpoint": "/x", "extra": 1}, "extra"),
        ({"name": "agent", "step": 1, "checkpoint": "/etc"}, "checkpoint"),
        ({"name": "agent", "step": 1, "checkpoint": "/x", "base_model": "other"}, "base_model"),
        ([1, 2], "body"),
    ],
)
async def test_a_bad_publish_is_a_400_naming_the_field(front: str, body: Any, param: str) -> None:
    status, reply = await _call(front, "POST", PUBLISH_PATH, body)
    assert status == 400
    assert reply["error"]["param"] == param


async def test_a_bad_retire_is_a_400_and_a_good_one_retires(front: str) -> None:
    status, reply = await _call(front, "POST", RETIRE_PATH, {"name": "agent", "step": True})
    assert (status, reply["error"]["param"]) == (400, "step")
    status, reply = await _call(front, "POST", RETIRE_PATH, {"name": "agent", "step": 3})
    assert (status, reply) == (200, {"retired": "agent@3"})
    status, body = await _call(front, "GET", PUBLISH_PATH)
    assert parse(ServedPolicies, body).policies == []


class _Engine(PolicyEngine):
    """vLLM's control calls recorded instead of sent."""

    calls: list[tuple[str, Any]]

    async def _call(self, path: str, body: Any = None) -> None:
        self.calls.append((path, body))


async def test_a_full_checkpoint_is_published_and_then_a_lora_one_is_a_400(
    tmp_path: Path,
) -> None:
    table = PolicyTable("base", "lora", lambda name, step: None)
    engine = _Engine(table, "http://127.0.0.1:9", "key", tmp_path, tmp_path / "work")
    engine.calls = []
    runner, url = await serve_app(Front(engine, TOKEN, tmp_path, lambda: True).app)
    try:
        full = tmp_path / "p" / "models" / "ft" / "checkpoints" / "0005"
        write_full(full)
        status, reply = await _call(
            url, "POST", PUBLISH_PATH, {"name": "ft", "step": 5, "checkpoint": str(full)}
        )
        assert (status, reply["model"]) == (200, "ft@5")
        assert engine.calls[0] == (
            "/collective_rpc",
            {
                "method": "artfleet_load_policy",
                "kwargs": {"base_dir": str(full), "factors_path": ""},
            },
        )
        lora = tmp_path / "p" / "models" / "pol" / "checkpoints" / "0001"
        write_adapter(lora, 2, 4, 8)
        status, reply = await _call(
            url, "POST", PUBLISH_PATH, {"name": "pol", "step": 1, "checkpoint": str(lora)}
        )
        assert (status, reply["error"]["param"]) == (400, "checkpoint")
        assert "vLLM's weights are the full fine-tune ft@5" in reply["error"]["message"]
        empty = tmp_path / "p" / "models" / "x" / "checkpoints" / "0001"
        empty.mkdir(parents=True)
        status, reply = await _call(
            url, "POST", PUBLISH_PATH, {"name": "x", "step": 1, "checkpoint": str(empty)}
        )
        assert (status, reply["error"]["param"]) == (400, "checkpoint")
        assert "holds no checkpoint" in reply["error"]["message"]
    finally:
        await runner.cleanup()
