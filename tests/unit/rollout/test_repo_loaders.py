"""The repo-task loaders on fixture files written in each published format, malformed
records included: they are skipped and counted by named reason, never a crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from repo_paths import FIXTURES

from artfleet_rollout.environments import get_environment
from artfleet_rollout.environments.repo_loaders import (
    R2E_TEST_COMMAND,
    LoaderError,
    load_r2e,
    load_swebench,
    load_swesynth,
)

REPO_TASKS = FIXTURES / "repo_tasks"


def test_swebench_records() -> None:
    env = load_swebench(str(REPO_TASKS / "swebench.jsonl"))
    assert [s.id for s in env.scenarios()] == ["astropy__astropy-12907", "psf__requests-2317"]
    astropy = env.get("astropy__astropy-12907")
    task = astropy.repo
    assert task is not None and task.source == "swebench"
    assert task.fail_to_pass == (
        "astropy/modeling/tests/test_separable.py::test_separable[compound_model6-result6]",
        "astropy/modeling/tests/test_separable.py::test_separable[compound_model9-result9]",
    )
    assert task.pass_to_pass == ("astropy/modeling/tests/test_separable.py::test_coord_matrix",)
    assert task.repo_dir == "/testbed" and task.commit.startswith("d16bfe05")
    assert astropy.image == "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"
    assert "separability_matrix" in astropy.instruction
    # The reference fix and the test patch never reach the agent, nor the repr (logs).
    assert "cright" not in astropy.instruction and "cright" not in repr(astropy)
    assert "astropy/modeling/tests/test_separable.py" in task.default_test_command()
    assert env.get("psf__requests-2317").image == "example.org/swe/requests-2317:v1"
    assert env.skipped == {
        "no FAIL_TO_PASS": 1,
        "FAIL_TO_PASS is not a JSON list": 1,
        "no problem_statement": 1,
        "no base_commit": 1,
        "not valid JSON": 1,
        "not a JSON object": 1,
    }
    # Described, the first bad records are named by their line; the rest by reason.
    path = REPO_TASKS / "swebench.jsonl"
    assert dict(env.describe().skipped) == {
        f"{path}:3: no FAIL_TO_PASS": 1,
        f"{path}:4: FAIL_TO_PASS is not a JSON list": 1,
        f"{path}:5: no problem_statement": 1,
        f"{path}:6: no base_commit": 1,
        f"{path}:7: not valid JSON (Expecting property name enclosed in double quotes "
        "at column 2)": 1,
        "not a JSON object": 1,
    }


def test_r2e_records() -> None:
    env = load_r2e(str(REPO_TASKS / "r2e.json"))
    (scenario,) = env.scenarios()
    task = scenario.repo
    assert task is not None and task.source == "r2e"
    assert scenario.image.startswith("namanjain12/aiohttp_final:")
    # Tests expected to pass are the ones a fix must make pass; FAILED ones are not asked.
    assert task.fail_to_pass == ("TestRedirect.test_keeps_query", "test_plain")
    assert task.test_command == R2E_TEST_COMMAND and task.repo_dir == "/testbed"
    assert env.skipped == {
        "no docker_image": 1,
        "no expected_output_json": 1,
        "expected_output_json is not JSON": 1,
        "no test expected to pass": 1,
        "not a JSON object": 1,
    }


def test_swesynth_records() -> None:
    env = load_swesynth(str(REPO_TASKS / "swesynth.jsonl"))
    assert sorted(s.id for s in env.scenarios()) == ["swesynth-1035", "swesynth-1036"]
    pager = env.get("swesynth-1035").repo
    assert pager is not None and pager.bug_types == ("off-by-one",)
    assert pager.test_command.startswith("cd /testbed") and not pager.hidden_tests()
    shop = env.get("swesynth-1036").repo
    assert shop is not None and shop.cached_repo == "acme/shop" and shop.commit == "0123abc"
    assert shop.fail_to_pass == ("tests/test_total.py::test_total",) and shop.repo_dir == ""
    assert env.skipped == {
        "no repository (docker_image, or repo + base_commit)": 1,  # an offline sample (SWE-SYNTH)
        "all_result is not passed/total": 1,
        "bug_types is not a list of names": 1,
        "no tests (FAIL_TO_PASS or test_command)": 1,
        "not a SWE-SYNTH sample (task_id, extra)": 1,
    }


def test_parquet_and_registry_names(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    lines = (REPO_TASKS / "swebench.jsonl").read_text().splitlines()
    good = [json.loads(line) for line in lines[:2]]
    for row in good:  # one column type per field, as a published parquet has
        for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            row[key] = row[key] if isinstance(row[key], str) else json.dumps(row[key])
        row.setdefault("image_name", "")
    path = tmp_path / "lite.parquet"
    pq.write_table(pa.Table.from_pylist(good), path)
    env = get_environment(f"swebench:{path}")
    assert env.name == f"swebench:{path}" and len(env.scenarios()) == 2 and env.skipped == {}


def test_missing_source_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LoaderError, match="no such file"):
        load_r2e(str(tmp_path / "absent.jsonl"))
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(LoaderError, match=r"expected \.jsonl"):
        load_swesynth(str(tmp_path / "data.csv"))


def test_a_missing_repo_source_is_the_tasks_invalid_argument(tmp_path: Path) -> None:
    # One LoaderError for every loader: the rollout maps it to INVALID_ARGUMENT naming
    # task.environment (a repo loader's own error class once escaped as a crash).
    from artfleet.contracts.errors import InvalidArgument
    from artfleet.v1 import rollout_pb2
    from artfleet_rollout.group import task_environment

    task = rollout_pb2.GroupTask(environment=f"swebench:{tmp_path / 'absent.jsonl'}")
    with pytest.raises(InvalidArgument, match="no such file") as info:
        task_environment(task)
    assert info.value.field == "task.environment"
