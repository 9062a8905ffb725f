"""Repo-task loaders: `swebench:<path>`, `r2e:<path>`, `swesynth:<path>`.

Each reads the published record format from a local JSONL, JSON or parquet file, or a
`datasets` dataset saved on disk (`save_to_disk`), once, at first use. A record that
lacks what a task needs (or is not JSON) is a bad record at its line, with a named reason
(`Environment.bad_records`, listed by `artfleet envs show`), never a crash; the trainer
refuses a job over them unless the job sets `skip_bad_records`.

- SWE-bench (`princeton-nlp/SWE-bench*`): `instance_id`, `repo`, `base_commit`,
  `problem_statement`, `patch` (the reference fix), `test_patch`, and `FAIL_TO_PASS` /
  `PASS_TO_PASS` as JSON-encoded lists of test ids (lists are taken too). The repo is in
  the instance's image at /testbed (`image_name` / `docker_image` when the record has one,
  else the `swebench/sweb.eval.x86_64.<id>` image name SWE-bench publishes).
- R2E-Gym / R2E-Gym-Lite: `docker_image` (the repo at /testbed, hidden tests at
  /r2e_tests), `problem_statement`, `expected_output_json` (a JSON object test name ->
  PASSED/FAILED, names without their module as R2E's log parser writes them); the tests
  expected to pass are the fail-to-pass set; `parsed_commit_content` is kept as the
  reference fix source. Tests run as R2E runs them: pytest over `r2e_tests`.
- SWE-SYNTH (the terminal agent's sample format): `task_id`, `extra.problem_statement`,
  `extra.fix_patch`, `extra.bug_types`, `extra.all_result` ("234/236"); a task also needs
  a repository (`extra.docker_image`/`image`, or `extra.repo` + `extra.base_commit`) and
  tests (`extra.FAIL_TO_PASS` or `extra.test_command`): offline samples without them are
  skipped ("no repository", "no tests").
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from artfleet.contracts.records import JSON_LINES_SUFFIXES, numbered, read_json_records

from .base import SPLITS, Environment, Scenario
from .loaders import LoaderError, Located, records_environment
from .repo_task import RepoTask

Record = dict[str, Any]
INSTRUCTION = (
    "{statement}\n\nThe repository is at {where}. Fix the issue above in its source code; "
    "hidden tests will check your fix."
)
_ALL_RESULT = re.compile(r"^\d+/\d+$")
R2E_TEST_COMMAND = (
    "cd /testbed && { [ -d /r2e_tests ] && cp -r /r2e_tests /testbed/r2e_tests; true; } && "
    "{ [ -x .venv/bin/python ] && PY=.venv/bin/python || PY=python3; } && "
    "$PY -m pytest -p no:cacheprovider -W ignore::DeprecationWarning "
    "--junitxml={junitxml} r2e_tests"
)


class Skip(Exception):
    """A record left out; the message is the counted reason."""


# ---------------------------------------------------------------- reading records


def read_records(source: str) -> Iterator[Located]:
    """Located records of a JSONL/JSON/parquet file or a saved `datasets` dir."""
    path = Path(source)
    if path.is_dir():
        yield from numbered(source, _read_saved_dataset(path))
    elif not path.is_file():
        raise LoaderError(f"{source}: no such file or dataset directory")
    elif path.suffix == ".parquet":
        yield from numbered(source, _read_parquet(path))
    elif path.suffix in (*JSON_LINES_SUFFIXES, ".json"):
        yield from read_json_records(path)
    else:
        raise LoaderError(f"{source}: expected .jsonl, .json, .parquet or a datasets dir")


def _read_parquet(path: Path) -> Iterator[Record]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise LoaderError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from None
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise LoaderError(f"{path}: not a readable parquet file ({exc})") from None
    yield from table.to_pylist()


def _read_saved_dataset(path: Path) -> Iterator[Record]:
    try:
        import datasets  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise LoaderError(
            f"{path}: a saved dataset needs `datasets` (pip install datasets)"
        ) from None
    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        for split in loaded.values():
            yield from split
    else:
        yield from loaded


# ---------------------------------------------------------------- fields


def _text(record: Record, key: str, reason: str) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value.strip():
        raise Skip(reason)
    return value


def _test_list(value: Any, key: str) -> tuple[str, ...]:
    """A list of test ids, given as a list or as its JSON encoding (as SWE-bench ships it)."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise Skip(f"{key} is not a JSON list") from None
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise Skip(f"{key} is not a list of test ids")
    return tuple(value)


def _split(record: Record, task_id: str) -> str:
    split = record.get("split")
    if isinstance(split, str) and split in SPLITS:
        return split
    # No split in the record: a fixed ~10% test split by id, the same on every load.
    return "test" if int(hashlib.sha256(task_id.encode()).hexdigest(), 16) % 10 == 0 else "train"


def _scenario(task_id: str, record: Record, task: RepoTask, image: str) -> Scenario:
    where = task.repo_dir or "the current directory"
    return Scenario(
        id=task_id,
        split=_split(record, task_id),
        title=" ".join(task.problem_statement.split())[:80],
        instruction=INSTRUCTION.format(statement=task.problem_statement.strip(), where=where),
        image=image,
        difficulty=task.difficulty,
        repo=task,
    )


# ---------------------------------------------------------------- formats


def swebench_scenario(record: Record) -> Scenario:
    instance_id = _text(record, "instance_id", "no instance_id")
    statement = _text(record, "problem_statement", "no problem_statement")
    repo = _text(record, "repo", "no repo")
    commit = _text(record, "base_commit", "no base_commit")
    f2p = _test_list(record.get("FAIL_TO_PASS"), "FAIL_TO_PASS")
    if not f2p:
        raise Skip("no FAIL_TO_PASS")
    image = record.get("image_name") or record.get("docker_image") or ""
    if not isinstance(image, str) or not image:
        image = f"swebench/sweb.eval.x86_64.{instance_id.replace('__', '_1776_')}:latest".lower()
    task = RepoTask(
        problem_statement=statement,
        fail_to_pass=f2p,
        pass_to_pass=_test_list(record.get("PASS_TO_PASS"), "PASS_TO_PASS"),
        test_patch=str(record.get("test_patch") or ""),
        repo_dir="/testbed",
        cached_repo=repo,
        commit=commit,
        reference_fix=str(record.get("patch") or ""),
        difficulty=str(record.get("difficulty") or ""),
        source="swebench",
    )
    return _scenario(instance_id, record, task, image)


def r2e_scenario(record: Record) -> Scenario:
    image = _text(record, "docker_image", "no docker_image")
    statement = _text(record, "problem_statement", "no problem_statement")
    raw = record.get("expected_output_json")
    try:
        expected = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        raise Skip("expected_output_json is not JSON") from None
    if not isinstance(expected, dict) or not expected:
        raise Skip("no expected_output_json")
    passing = tuple(name for name, status in expected.items() if status == "PASSED")
    if not passing:
        raise Skip("no test expected to pass")
    task_id = str(record.get("instance_id") or image.rsplit("/", 1)[-1].replace(":", "-"))
    task = RepoTask(
        problem_statement=statement,
        fail_to_pass=passing,
        test_command=R2E_TEST_COMMAND,
        repo_dir="/testbed",
        cached_repo=str(record.get("repo_name") or ""),
        commit=str(record.get("commit_hash") or ""),
        reference_fix=str(record.get("parsed_commit_content") or ""),
        source="r2e",
    )
    return _scenario(task_id, record, task, image)


def swesynth_scenario(record: Record) -> Scenario:
    extra = record.get("extra")
    if "task_id" not in record or not isinstance(extra, dict):
        raise Skip("not a SWE-SYNTH sample (task_id, extra)")
    statement = _text(extra, "problem_statement", "no problem_statement")
    result = extra.get("all_result")
    if result is not None and not (isinstance(result, str) and _ALL_RESULT.match(result)):
        raise Skip("all_result is not passed/total")
    bug_types = extra.get("bug_types") or []
    if not isinstance(bug_types, list) or not all(isinstance(b, str) for b in bug_types):
        raise Skip("bug_types is not a list of names")
    image = str(extra.get("docker_image") or extra.get("image") or "")
    repo, commit = str(extra.get("repo") or ""), str(extra.get("base_commit") or "")
    if not image and not (repo and commit):
        raise Skip("no repository (docker_image, or repo + base_commit)")
    f2p = _test_list(extra.get("FAIL_TO_PASS"), "FAIL_TO_PASS")
    command = str(extra.get("test_command") or "")
    if not f2p and not command:
        raise Skip("no tests (FAIL_TO_PASS or test_command)")
    task = RepoTask(
        problem_statement=statement,
        fail_to_pass=f2p,
        pass_to_pass=_test_list(extra.get("PASS_TO_PASS"), "PASS_TO_PASS"),
        test_command=command,
        repo_dir=str(extra.get("repo_dir") or ("/testbed" if image else "")),
        cached_repo=repo,
        commit=commit,
        reference_fix=str(extra.get("fix_patch") or ""),
        bug_types=tuple(bug_types),
        source="swesynth",
    )
    return _scenario(f"swesynth-{record['task_id']}", record, task, image)


# ---------------------------------------------------------------- environments


def load_records(
    name: str, source: str, build: Callable[[Record], Scenario], description: str
) -> Environment:
    def make(record: Record, _position: int) -> Scenario:
        return build(record)

    return records_environment(
        read_records(source),
        make,
        f"{name}:{source}",
        f"{description} from {os.path.basename(source)}",
        skip=Skip,
    )


def load_swebench(source: str) -> Environment:
    return load_records("swebench", source, swebench_scenario, "SWE-bench instances")


def load_r2e(source: str) -> Environment:
    return load_records("r2e", source, r2e_scenario, "R2E-Gym tasks")


def load_swesynth(source: str) -> Environment:
    return load_records("swesynth", source, swesynth_scenario, "SWE-SYNTH tasks")


LOADERS: dict[str, Callable[[str], Environment]] = {
    "swebench": load_swebench,
    "r2e": load_r2e,
    "swesynth": load_swesynth,
}
