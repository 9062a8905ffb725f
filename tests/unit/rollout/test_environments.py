"""Environment registry, the shell-tasks data and its validation, DescribeEnvironment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from artfleet_rollout.agents.terminal import build_initial_messages, classify_command
from artfleet_rollout.environments import (
    Environment,
    Scenario,
    ScenarioDataError,
    UnknownEnvironment,
    UnknownScenario,
    UnknownSplit,
    get_environment,
    list_environments,
    load_shell_tasks,
    parse_shell_tasks,
    register_environment,
    registry,
)

ENV = get_environment("shell-tasks")


def _task(**overrides: Any) -> dict[str, Any]:
    task = {
        "id": "t1",
        "split": "train",
        "title": "T",
        "instruction": "Do it.",
        "check": "test -f x",
        "solution": "touch x",
    }
    task.update(overrides)
    return task


def test_registry_lists_and_caches() -> None:
    assert "shell-tasks" in list_environments()
    assert get_environment("shell-tasks") is ENV


def test_unknown_environment_names_the_known_ones() -> None:
    with pytest.raises(UnknownEnvironment) as info:
        get_environment("nope")
    assert isinstance(info.value, KeyError)
    assert "nope" in str(info.value) and "shell-tasks" in str(info.value)


def test_register_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # Work on copies so the extra environment does not leak into other tests.
    monkeypatch.setattr(registry, "_FACTORIES", dict(registry._FACTORIES))
    monkeypatch.setattr(registry, "_LOADED", dict(registry._LOADED))
    env = Environment("tiny", "d", [Scenario("a", "train", "A", "do a", check="true")])
    register_environment("tiny", lambda: env)
    assert get_environment("tiny") is env
    assert "tiny" in list_environments()


def test_splits_are_fixed_and_about_three_quarters_train() -> None:
    sizes = ENV.split_sizes()
    assert sizes["train"] + sizes["test"] == len(ENV.scenarios()) >= 40
    assert 0.70 <= sizes["train"] / len(ENV.scenarios()) <= 0.80
    assert all(s.split == "train" for s in ENV.scenarios("train"))
    assert ENV.scenarios("") == ENV.scenarios(None) == ENV.scenarios()


def test_several_tasks_are_one_command_easy() -> None:
    easy = [s for s in ENV.scenarios() if s.difficulty == "easy"]
    assert len(easy) >= 8
    assert all("\n" not in s.solution and "&&" not in s.solution for s in easy)


def test_every_solution_modifies_files_by_the_heuristics() -> None:
    # Not required by the checks, but a good sign the "code modified" heuristic fits the
    # tasks we train on: every reference solution should count as a modification.
    missed = [s.id for s in ENV.scenarios() if not classify_command(s.solution).modifies_files]
    assert missed == []


def test_get_and_unknown_scenario_and_split() -> None:
    assert ENV.get("create-hello-file").title == "Create hello.txt"
    with pytest.raises(UnknownScenario, match="no scenario 'missing'"):
        ENV.get("missing")
    with pytest.raises(UnknownSplit, match="known: train, test"):
        ENV.scenarios("validation")


def test_solution_is_not_in_repr_or_prompt() -> None:
    scenario = ENV.get("create-hello-file")
    assert scenario.solution not in repr(scenario)
    prompt = str(build_initial_messages(scenario))
    assert scenario.solution not in prompt and scenario.check not in prompt


def test_describe() -> None:
    info = ENV.describe()
    assert info.name == "shell-tasks"
    assert info.agent == "terminal"
    assert info.description
    assert dict(info.split_sizes) == ENV.split_sizes()
    assert [s.id for s in info.scenarios] == [s.id for s in ENV.scenarios()]
    assert info.scenarios[0].title and info.scenarios[0].split in ("train", "test")


def test_load_from_a_path(tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text(yaml.safe_dump({"name": "mine", "tasks": [_task(files={"a/b.txt": "x"})]}))
    env = load_shell_tasks(path)
    assert env.name == "mine"
    assert env.get("t1").files == {"a/b.txt": "x"}


@pytest.mark.parametrize(
    ("tasks", "message"),
    [
        ([_task(), _task()], "duplicate task id 't1'"),
        ([_task(id="Bad Id")], ".id"),
        ([_task(split="dev")], ".split"),
        ([_task(check="")], ".check: required"),
        ([_task(check="  ")], ".check: required"),
        ([_task(solution=None)], ".solution: required"),
        ([_task(check="false\ntrue")], "one line"),
        ([_task(files={"/etc/passwd": "x"})], "plain relative path"),
        ([_task(files={"../x": "x"})], "plain relative path"),
        ([_task(files={"a/./b": "x"})], "plain relative path"),
        ([_task(files={"dir/": "x"})], "must name a file"),
        ([_task(files={"n.txt": 7})], "content must be a string"),
        ([_task(files=["a"])], "mapping of path"),
        ([_task(difficulty="extreme")], ".difficulty"),
        ([_task(network="yes")], ".network: must be true or false"),
        ([_task(chek="typo")], "unknown keys ['chek']"),
        (["not a mapping"], "must be a mapping"),
    ],
)
def test_validation_names_task_and_field(tasks: list[Any], message: str) -> None:
    with pytest.raises(ScenarioDataError) as info:
        parse_shell_tasks({"tasks": tasks})
    assert message in str(info.value)
    assert "tasks[" in str(info.value)


def test_validation_of_the_top_level() -> None:
    with pytest.raises(ScenarioDataError, match="`tasks` list"):
        parse_shell_tasks({"name": "x"})


def test_check_line_continuations_are_allowed() -> None:
    env = parse_shell_tasks({"tasks": [_task(check="test -f x && \\\n  test -s x")]})
    assert env.get("t1").check.startswith("test -f x")


def test_a_task_may_ask_for_network() -> None:
    env = parse_shell_tasks({"tasks": [_task(network=True), _task(id="t2")]})
    assert [s.network for s in env.scenarios("train")] == [True, False]
