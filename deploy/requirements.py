"""Print the requirements of one or more of pyproject.toml's dependency sets, one a line.

    python3 deploy/requirements.py [--exclude NAME ...] [EXTRA ...]

The base `dependencies` always, plus each EXTRA (`artfleet[...]` references inside an
extra are followed). The service images install exactly this, from pyproject.toml alone,
before the code: a code change then does not reinstall the dependencies. `--exclude`
drops requirements by project name (the GPU trainer brings its own CUDA torch).
Standard library only: it runs in a bare image.
"""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(
    pyproject: dict, extras: list[str], exclude: frozenset[str] = frozenset()
) -> list[str]:
    project = pyproject["project"]
    me = _canonical(project["name"])
    optional: dict[str, list[str]] = project.get("optional-dependencies", {})
    out: list[str] = []
    seen: set[str] = set()

    def add(requirement: str) -> None:
        match = _NAME.match(requirement)
        if match is None:
            raise ValueError(f"cannot read requirement {requirement!r}")
        name = _canonical(match.group(1))
        if name == me:  # artfleet[a,b]: those extras' requirements
            for extra in (match.group(2) or "").split(","):
                visit(extra.strip())
        elif name not in exclude and requirement not in out:
            out.append(requirement)

    def visit(extra: str) -> None:
        if extra in seen:
            return
        if extra not in optional:
            raise SystemExit(f"pyproject.toml has no extra {extra!r} (has: {sorted(optional)})")
        seen.add(extra)
        for requirement in optional[extra]:
            add(requirement)

    for requirement in project.get("dependencies", []):
        add(requirement)
    for extra in extras:
        visit(extra)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("extras", nargs="*")
    parser.add_argument("--exclude", action="append", default=[])
    parser.add_argument("--pyproject", type=Path, default=Path("pyproject.toml"))
    args = parser.parse_args()
    pyproject = tomllib.loads(args.pyproject.read_text())
    exclude = frozenset(_canonical(n) for n in args.exclude)
    print("\n".join(requirements(pyproject, args.extras, exclude)))


if __name__ == "__main__":
    main()
