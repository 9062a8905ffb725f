"""A key given twice in a job YAML (or a HUD config.yaml, or a --reward list) is refused
naming the key and its lines, exit 2; PyYAML alone keeps the last value silently."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from artfleet.contracts.errors import InvalidArgument
from artfleet.specs.yaml_text import DuplicateKey, load_yaml
from artfleet_cli.main import app

JOB = """\
name: agent
steps: 2
sft:
  data_path: /data/samples.json
  epochs: 1
max_turns: 3
steps: 5
"""
# A HUD config.yaml is a job file too (artfleet.specs.hud_config).
HUD_CONFIG = """\
environments:
  2048:
    mcp_config:
      local: {command: artfleet-mcp-2048, args: []}
training:
  default:
    learning_rate: 1e-5
    rollouts_per_group: 4
    learning_rate: 1e-3
"""


def test_a_duplicate_key_names_the_key_and_both_lines() -> None:
    with pytest.raises(DuplicateKey) as info:
        load_yaml(JOB, "job.yaml")
    assert isinstance(info.value, InvalidArgument)
    assert str(info.value) == "job.yaml:7: duplicate key 'steps' (first at line 2)"
    nested = "sft:\n  epochs: 1\n  data_path: a\n  epochs: 2\n"
    with pytest.raises(DuplicateKey, match=r"^<yaml>:4: duplicate key 'epochs' \(first at line 2"):
        load_yaml(nested)
    with pytest.raises(DuplicateKey, match="duplicate key 'name'"):
        load_yaml("- {name: process, name: tests}")


def test_yaml_without_duplicates_loads_as_safe_load_does() -> None:
    text = "base: &b {epochs: 1, shuffle: false}\nsft:\n  <<: *b\n  epochs: 3\nsteps: 2\n"
    # A key beside a merge (`<<`) overrides the merged one, as YAML intends: no error.
    assert load_yaml(text) == {
        "base": {"epochs": 1, "shuffle": False},
        "sft": {"epochs": 3, "shuffle": False},
        "steps": 2,
    }
    with pytest.raises(Exception, match="could not determine a constructor"):
        load_yaml("!!python/object:os.system {}")  # still safe


def _submit(*args: str) -> tuple[int, str]:
    env = {"ARTFLEET_API_TOKEN": "t", "COLUMNS": "300"}
    result = CliRunner().invoke(app, [*args, "--target", "127.0.0.1:1"], env=env)
    return result.exit_code, result.stderr


def test_the_cli_refuses_a_job_file_with_a_duplicate_key(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    code, err = _submit("jobs", "submit", str(job))
    # Refused before any trainer is asked (none is at the target).
    assert code == 2, err
    assert err.strip() == f"error: {job}:7: duplicate key 'steps' (first at line 2)"
    job.write_text(HUD_CONFIG)
    code, err = _submit("jobs", "submit", str(job))
    assert code == 2 and f"{job}:9: duplicate key 'learning_rate' (first at line 7)" in err, err
    reward = tmp_path / "reward.yaml"
    reward.write_text("- name: process\n  weight: 1\n  weight: 2\n")
    args = ("--reward", str(reward), "--base-url", "http://x/v1", "--model", "m@0")
    code, err = _submit("rollout", "run", *args)
    assert code == 2 and f"{reward}:3: duplicate key 'weight'" in err, err
