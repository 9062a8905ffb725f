"""The documents a user gets with a clone link only to what the clone holds: every relative
link names a file that exists and, with `#anchor`, a heading of that markdown file (GitHub's
slug). README.md stays a short front door that gives the two commands."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from repo_paths import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]*)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")
README_MAX_LINES = 220


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link text kept, lower case, punctuation dropped,
    spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    """Every heading's anchor, outside code blocks; repeats get -1, -2, ... as on GitHub."""
    found: set[str] = set()
    seen: Counter[str] = Counter()
    in_code = False
    for line in doc.read_text().splitlines():
        if FENCE.match(line):
            in_code = not in_code
            continue
        heading = HEADING.match(line)
        if in_code or not heading:
            continue
        base = slug(heading.group(1))
        found.add(f"{base}-{seen[base]}" if seen[base] else base)
        seen[base] += 1
    return found


def broken_links(doc: Path, root: Path = ROOT) -> list[str]:
    broken = []
    for link in LINK.findall(doc.read_text()):
        if re.match(r"^[a-z]+:", link):
            continue  # a URL or mailto:
        target, _, anchor = link.partition("#")
        path = (doc.parent / target).resolve() if target else doc
        if not path.is_relative_to(root):
            broken.append(f"{link} (outside the repository)")
        elif not path.exists():
            broken.append(f"{link} (no such file)")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{link} (no heading #{anchor} in {path.name})")
    return broken


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_inside_the_repository(doc: Path) -> None:
    broken = broken_links(doc)
    assert not broken, f"{doc.relative_to(ROOT)} has broken links:\n" + "\n".join(broken)


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    topic = tmp_path / "docs" / "topic.md"
    topic.write_text(
        "# Topic\n\n## Job spec (YAML keys = flags)\n\n## `Sandbox.McpStdio`: streams\n\n"
        "## Repeat\n\n## Repeat\n\n```yaml\n# not a heading\n```\n"
    )
    good = [
        "[t](docs/topic.md)",
        "[t](docs/topic.md#job-spec-yaml-keys--flags)",
        "[t](docs/topic.md#sandboxmcpstdio-streams)",
        "[t](docs/topic.md#repeat-1)",
        "[w](https://example.com/x.md#nowhere)",
    ]
    bad = [
        "[t](docs/missing.md)",
        "[t](docs/topic.md#no-such-heading)",
        "[t](docs/topic.md#not-a-heading)",
        "[t](docs/topic.md#repeat-2)",
        "[t](#nowhere-here)",
        "[t](../../outside.md)",
    ]
    readme = tmp_path / "README.md"
    readme.write_text("# Here\n\n" + "\n".join(good) + "\n")
    assert broken_links(readme, tmp_path) == []
    for link in bad:
        readme.write_text(f"# Here\n\n{link}\n")
        assert len(broken_links(readme, tmp_path)) == 1, link


def test_readme_is_a_short_front_door_with_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < README_MAX_LINES
    # The test command CI runs (.ci/run: make check) is the one the README gives.
    assert "make demo    #" in readme and "make check   #" in readme
    assert "make check" in (ROOT / ".ci" / "run").read_text()


def test_readme_links_the_architecture_document_and_every_topic_document() -> None:
    readme = (ROOT / "README.md").read_text()
    for doc in DOCS[1:]:
        assert f"](docs/{doc.name})" in readme, doc.name
