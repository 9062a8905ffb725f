"""Environments and agent kinds installed as packages (entry points `artfleet.environments`
and `artfleet.agents`), beside the bundled ones in one registry each: where each comes
from, a plugin that cannot load listed as broken and refused by name with its error, and a
plugin kind's runner driving an episode."""

from __future__ import annotations

import importlib
import json
import pkgutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from plugin_dist import install_plugin
from prometheus_client import REGISTRY
from pydantic import SecretStr
from rollout_fakes import group_task
from typer.testing import CliRunner

from artfleet.contracts.errors import InvalidArgument
from artfleet.v1 import rollout_pb2
from artfleet_cli.main import app
from artfleet_rollout.agents import kinds
from artfleet_rollout.agents.kinds import BUNDLED, UnknownAgent, agent_kinds, agent_runner
from artfleet_rollout.environments import (
    BrokenEnvironment,
    environment_sources,
    get_environment,
    list_environments,
)
from artfleet_rollout.environments import registry as environments
from artfleet_rollout.episode import EpisodeContext, run_episode
from artfleet_rollout.installed import export_metrics
from artfleet_rollout.plugins import BUNDLED as BUNDLED_SOURCE
from artfleet_rollout.plugins import Provenance
from artfleet_rollout.servicer import RolloutServicer
from artfleet_rollout.settings import RolloutSettings

PLUGIN = '''
from artfleet_rollout.environments import Environment, Scenario


def load_guess():
    """A game of its own: one scenario per number, played by the plugin's own kind."""
    return Environment(
        "guess", "guess a number",
        [Scenario(id=f"n{i}", split="train", title="guess", instruction=str(i)) for i in range(3)],
        agent="guess-kind",
    )


def raises():
    raise RuntimeError("the game server is not configured")


async def run_guess(ctx, trajectory, episode):
    trajectory.messages_and_choices = [{"role": "user", "content": ctx.scenario.instruction}]
    trajectory.metrics["guessed"] = 1.0
    episode.finish = "answer"
'''
ENTRY_POINTS = """\
[artfleet.environments]
guess = artfleet_test_guess:load_guess
raising = artfleet_test_guess:raises
missing = artfleet_test_no_such_module:load
shell-tasks = artfleet_test_guess:load_guess

[artfleet.agents]
guess-kind = artfleet_test_guess:run_guess
broken-kind = artfleet_test_no_such_module:run
terminal = artfleet_test_guess:run_guess
"""
SOURCE = Provenance("artfleet-test-guess", "0.3")


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    install_plugin(
        tmp_path, monkeypatch, "artfleet_test_guess", PLUGIN, ENTRY_POINTS, version="0.3"
    )
    kinds.reload_plugins()
    environments.reload_plugins()
    yield
    kinds.reload_plugins()
    environments.reload_plugins()


def test_every_bundled_kind_module_is_registered_once() -> None:
    # Adding a kind is a module plus one registry line: a module left out fails here.
    modules = {
        name: importlib.import_module(f"{kinds.__name__}.{name}")
        for _, name, _ in pkgutil.iter_modules(kinds.__path__)
    }
    declared = {m.KIND: m for m in modules.values() if hasattr(m, "KIND")}
    assert set(declared) == set(BUNDLED) and len(declared) == len(modules)
    for kind, module in declared.items():
        assert BUNDLED[kind].__module__ == module.__name__, kind


def test_plugins_are_listed_with_their_package_and_version(plugin: None) -> None:
    assert environment_sources()["guess"] == SOURCE
    assert environment_sources()["shell-tasks"] == BUNDLED_SOURCE  # not replaced
    assert agent_kinds()["guess-kind"] == SOURCE
    assert agent_kinds()["terminal"] == BUNDLED_SOURCE
    assert agent_runner("terminal") is BUNDLED["terminal"]
    assert "guess" in list_environments() and "missing" not in list_environments()
    assert get_environment("guess").agent == "guess-kind"


def test_a_broken_plugin_is_refused_by_name_with_its_error(plugin: None) -> None:
    with pytest.raises(BrokenEnvironment, match=r"'missing' .*ModuleNotFoundError"):
        get_environment("missing")
    with pytest.raises(BrokenEnvironment, match="the game server is not configured"):
        get_environment("raising")
    with pytest.raises(UnknownAgent, match=r"'broken-kind' .*ModuleNotFoundError"):
        agent_runner("broken-kind")
    with pytest.raises(UnknownAgent, match=r"unknown agent kind 'nope'; known: .*guess-kind"):
        agent_runner("nope")


async def test_a_broken_environment_is_an_invalid_argument_at_describe(plugin: None) -> None:
    servicer = RolloutServicer.__new__(RolloutServicer)  # DescribeEnvironment needs no runner
    request = rollout_pb2.DescribeEnvironmentRequest(name="missing")
    with pytest.raises(InvalidArgument, match="failed to load") as caught:
        await servicer.DescribeEnvironment(request, None)
    assert caught.value.field == "name"


async def test_a_plugin_kind_runs_the_episode(plugin: None) -> None:
    scenario = get_environment("guess").get("n2")
    settings = RolloutSettings(api_token=SecretStr("unit-test-token"))
    task = group_task(environment="guess", scenario_id="n2", rollouts=1)
    ctx = EpisodeContext(task, scenario, None, None, settings, agent="guess-kind")  # type: ignore[arg-type]
    trajectory, episode = await run_episode(ctx, 0)
    assert trajectory.messages_and_choices == [{"role": "user", "content": "2"}]
    assert trajectory.metrics["guessed"] == 1.0 and episode.finish == "answer"
    assert episode.agent == "guess-kind"
    assert trajectory.metadata["agent_plugin"] == "artfleet-test-guess 0.3"
    assert trajectory.metadata["environment_plugin"] == "artfleet-test-guess 0.3"


def test_envs_list_says_where_each_comes_from_and_what_is_broken(plugin: None) -> None:
    listed = CliRunner().invoke(app, ["envs", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    data = json.loads(listed.output)
    sources = {r["name"]: r["source"] for r in data["environments"]}
    assert sources["guess"] == "artfleet-test-guess 0.3" and sources["code-fix"] == "bundled"
    assert data["agents"]["guess-kind"] == "artfleet-test-guess 0.3"
    broken = {(b["kind"], b["name"]): b["error"] for b in data["broken"]}
    assert set(broken) == {
        ("environment", "missing"),
        ("environment", "raising"),
        ("agent kind", "broken-kind"),
    }
    assert "the game server is not configured" in broken[("environment", "raising")]
    table = CliRunner().invoke(app, ["envs", "list"])
    assert table.exit_code == 0 and "artfleet-test-guess 0.3" in table.output
    assert "broken: environment 'missing'" in table.output


async def test_the_worker_lists_and_exports_each_plugin_with_its_version(plugin: None) -> None:
    servicer = RolloutServicer.__new__(RolloutServicer)  # ListPlugins needs no runner
    reply = await servicer.ListPlugins(rollout_pb2.ListPluginsRequest(), None)
    listed = {(p.group, p.name): p for p in reply.plugins}
    assert {(g, n, p.state) for (g, n), p in listed.items()} == {
        ("artfleet.agents", "guess-kind", "loaded"),
        ("artfleet.agents", "broken-kind", "broken"),
        ("artfleet.environments", "guess", "loaded"),
        ("artfleet.environments", "missing", "broken"),
        # Its import worked, its factory failed: broken from the start, not at first use.
        ("artfleet.environments", "raising", "broken"),
    }
    assert {(p.package, p.version) for p in reply.plugins} == {("artfleet-test-guess", "0.3")}
    raising = listed["artfleet.environments", "raising"]
    assert "the game server is not configured" in raising.error
    export_metrics(list(reply.plugins))

    def sample(group: str, name: str, state: str, version: str = "0.3") -> float | None:
        labels = {"group": group, "name": name, "package": "artfleet-test-guess"}
        labels |= {"version": version, "state": state}
        return REGISTRY.get_sample_value("artfleet_rollout_plugins", labels)

    assert sample("artfleet.agents", "guess-kind", "loaded") == 1
    assert sample("artfleet.agents", "broken-kind", "broken") == 1
    assert sample("artfleet.environments", "guess", "loaded") == 1
    assert sample("artfleet.environments", "missing", "broken") == 1
