"""No service imports another: each `artfleet_<service>` package imports the kernel
(`artfleet`) and itself, never a sibling. What two services share lives in the kernel
(e.g. the base-model names and the embedded model's copy, which the trainer and the
inference service both load). The CLI's exceptions are named below, each with its reason."""

from __future__ import annotations

import ast
from pathlib import Path

from repo_paths import ROOT

SERVICES = ROOT / "services"
# (importing package, imported package): why it is allowed.
EXCEPTIONS = {
    # `artfleet envs list` reads the environments the rollout registers, on the user's
    # machine, as a local fleet would run them (no service needs to be up).
    ("artfleet_cli", "artfleet_rollout"): "the CLI reads the rollout's environment registry",
}


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def violations() -> list[str]:
    found = []
    for package in sorted(SERVICES.glob("*/artfleet_*")):
        own = package.name
        for path in sorted(package.rglob("*.py")):
            for name in sorted(_imported(path)):
                if name.startswith("artfleet_") and name != own and (own, name) not in EXCEPTIONS:
                    found.append(f"{path.relative_to(SERVICES)} imports {name}")
    return found


def test_no_service_imports_another() -> None:
    assert violations() == []


def test_the_check_sees_an_import_of_another_service(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import os\nfrom artfleet_trainer.jobs import store\nimport artfleet.v1\n")
    assert _imported(module) == {"os", "artfleet_trainer", "artfleet"}
