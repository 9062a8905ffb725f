"""The repository names things by what they are: no numbering of the projects it was
modelled on and no work-item numbers in code, docs or tests (those live in git history).
A random seed (`--seed 7`, `spec.seed`) is a different word and stays."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from repo_paths import ROOT

FORBIDDEN = re.compile(
    r"seed[ _-]?0\d\d"  # a reference project by number, e.g. the fourth one's format
    r"|(?-i:\bSEED_(?!FIELD_NUMBER)[A-Z])"  # a constant named for its source, not its content
    r"|\bissues?[ _-]?#?\d+",  # a work item by number
    re.IGNORECASE,
)
# The one allowed line: the old SFT format value, still accepted for stored job specs.
ALLOWED = {("src/artfleet/specs/sft.py", 'FORMAT_ALIASES = {"seed004": "offline"}')}
GENERATED = re.compile(r"_pb2(_grpc)?\.pyi?$")
SELF = str(Path(__file__).resolve().relative_to(ROOT))  # it spells the patterns out


def _tracked_text_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    return [
        name
        for name in listed.stdout.split("\0")
        if name and name != SELF and not GENERATED.search(name) and not name.startswith(".venv")
    ]


def _findings(names: list[str]) -> list[str]:
    found = []
    for name in names:
        path = ROOT / name
        if FORBIDDEN.search(name):
            found.append(f"{name}: (file name)")
        if not path.is_file():
            continue  # deleted in the work tree, not yet committed
        data = path.read_bytes()
        if b"\0" in data:
            continue  # binary
        text = data.decode("utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            if FORBIDDEN.search(line) and (name, line.strip()) not in ALLOWED:
                found.append(f"{name}:{number}: {line.strip()[:120]}")
    return found


def test_no_reference_project_numbers_or_issue_numbers_in_tracked_files() -> None:
    found = _findings(_tracked_text_files())
    assert not found, "provenance names (say what the thing is instead):\n" + "\n".join(found)


def test_the_pattern_tells_a_reference_number_from_a_random_seed() -> None:
    flagged = [
        "seed 002's body",
        "Seed-004 table",
        "def test_seed_003_config",
        "SEED_FIELDS = {",
        "(issue #15)",
        "issues 12, 22",
    ]
    kept = ["--seed 1", "seed 7 (the default)", "seeds 100-102", "spec.seed", "_SEED = 3"]
    kept += ["pb.JobSpec.SEED_FIELD_NUMBER", "def seed_everything", "tissue 3"]
    assert all(FORBIDDEN.search(text) for text in flagged)
    assert not any(FORBIDDEN.search(text) for text in kept)
