"""The HUD integration's config.yaml as a job spec: its `environments:` entry becomes the
job's `mcp_config` and `max_turns` (the taskset bundled or named), its `training:` profile
becomes job spec keys, and a key we do not know is refused by its path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from artfleet.contracts.errors import InvalidArgument
from artfleet.specs.job import config_hash, spec_from_proto, spec_to_proto, validate_spec
from artfleet_cli.jobs import load_spec
from artfleet_cli.main import app

# The HUD integration's README, with the bundled 2048 server (YAML reads `2048:` as an int).
CONFIG_YAML = """\
environments:
  2048:
    mcp_config:
      local:
        command: "artfleet-mcp-2048"
        args: []
    max_turns: 15

training:
  default:
    learning_rate: 1e-5
    rollouts_per_group: 4
"""
SERVER = {"local": {"command": "artfleet-mcp-2048", "args": []}}
TASKS = "hud:/data/tasks.json"
REMOTE = {"ssh": {"command": "ssh", "args": ["user@host", "docker", "run", "mcp-server"]}}


def test_the_hud_config_yaml_is_a_job_spec(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG_YAML)
    spec = load_spec(path, {})
    assert spec.environment == "game-2048"  # HUD's 2048 is our bundled taskset
    assert spec.mcp_config == SERVER
    assert spec.max_turns == 15
    assert (spec.learning_rate, spec.rollouts_per_group) == (1e-5, 4)
    # Flags win over the file, as for every other key.
    assert load_spec(path, {"max_turns": 3}).max_turns == 3
    # The server travels with the job, and is part of what it trains.
    assert json.loads(spec_to_proto(spec).mcp_config) == SERVER
    assert spec_from_proto(spec_to_proto(spec)) == spec
    plain = spec.model_copy(update={"mcp_config": None})
    assert config_hash(plain) != config_hash(spec)


def test_environment_picks_the_entry_and_names_the_taskset() -> None:
    remote = {"mcp_config": REMOTE, "taskset": TASKS}  # HUD's dataset_map, for the entry
    two = {"2048": {"mcp_config": SERVER}, "remote_env": remote}
    picked = validate_spec({"environments": two, "environment": "remote_env"})
    assert picked.mcp_config == REMOTE and picked.environment == TASKS
    assert validate_spec({"environments": two, "environment": 2048}).mcp_config == SERVER
    # The only entry needs no name; a taskset named outright is kept.
    one = {"remote_env": {"mcp_config": REMOTE}}
    named = validate_spec({"environments": one, "environment": TASKS})
    assert named.mcp_config == REMOTE and named.environment == TASKS
    assert named.max_turns == validate_spec({}).max_turns  # the spec's default


@pytest.mark.parametrize(
    ("data", "field", "says"),
    [
        (
            {"environments": {"2048": {"mcp_config": SERVER, "max_steps": 3}}},
            "environments.2048.max_steps",
            "unknown key; known: mcp_config, max_turns, taskset",
        ),
        (
            {"environments": {"2048": {"mcp_config": SERVER | REMOTE}}},
            "environments.2048.mcp_config",
            "exactly one server",
        ),
        ({"environments": {"2048": {"max_turns": 5}}}, "environments.2048.mcp_config", "required"),
        (
            {"environments": {"2048": {"mcp_config": SERVER, "max_turns": 0}}},
            "environments.2048.max_turns",
            ">= 1",
        ),
        (
            {"environments": {"my_env": {"mcp_config": REMOTE}}},
            "environments.my_env.taskset",
            "taskset: hud:<path>",
        ),
        (
            {"environments": {"a": {"mcp_config": SERVER}, "b": {"mcp_config": REMOTE}}},
            "environment",
            "a, b",
        ),
        ({"environments": []}, "environments", "must map"),
        ({"training": {"default": {"learning_rates": 1}}}, "training.default.learning_rates", ""),
        ({"mcp_config": {"local": "artfleet-mcp-2048"}}, "mcp_config", "must be a mapping"),
    ],
)
def test_what_is_wrong_is_named_by_its_path(data: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        validate_spec(data)
    assert info.value.field == field
    assert says in str(info.value)


def test_the_cli_refuses_an_unknown_entry_key_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG_YAML.replace("max_turns: 15", "max_turns: 15\n    timeout: 9"))
    result = CliRunner().invoke(
        app,
        ["jobs", "submit", str(path), "--target", "127.0.0.1:1"],
        env={"ARTFLEET_API_TOKEN": "t"},
    )
    assert result.exit_code == 2, result.output
    assert "environments.2048.timeout: unknown key" in result.output
