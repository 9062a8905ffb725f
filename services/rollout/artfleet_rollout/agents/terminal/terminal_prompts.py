"""The terminal agent's prompt: short, because the default policy is a 135M model whose
whole episode must fit a context budget of a couple of thousand tokens."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

_SYSTEM_PROMPT = """You are an agent working in a Linux shell, in the task's directory.
Each reply: a THOUGHT line, then exactly one bash block with one command. Example:
THOUGHT: I will create the file.
```bash
echo hi > a.txt
```
One shell runs all your commands: cd and variables persist.
You will see the command's output. When the task is done, reply with the command: submit"""

MAX_LISTED_FILES = 12  # past this the listing costs more context than it saves turns


class TaskLike(Protocol):
    """What the prompt needs from a scenario (environments.Scenario fits)."""

    @property
    def instruction(self) -> str: ...

    @property
    def files(self) -> Mapping[str, str]: ...


def system_prompt() -> str:
    return _SYSTEM_PROMPT


def _file_listing(files: Mapping[str, str]) -> str:
    # Listing the starting files saves a tiny model the `ls` turn it would otherwise need.
    names = sorted(files)
    if not names:
        return "The directory is empty."
    shown = ", ".join(names[:MAX_LISTED_FILES])
    more = len(names) - MAX_LISTED_FILES
    return f"Files: {shown}" + (f" (and {more} more)" if more > 0 else "")


# A worked episode before the real task. Instructions alone do not get the format out of a
# 135M model (its sampled replies did not parse: docs/benchmarks.md); one demonstrated
# exchange does (most replies parse). The demonstration is plain messages, so ART never
# trains on it.
_DEMONSTRATION: tuple[dict[str, str], ...] = (
    {
        "role": "user",
        "content": "Task: Create a file named notes.txt containing the word draft."
        "\nThe directory is empty.",
    },
    {
        "role": "assistant",
        "content": "THOUGHT: I write the word into the file with echo."
        "\n```bash\necho draft > notes.txt\n```",
    },
    {"role": "user", "content": "exit_code: 0\nstdout: (empty)\nstderr: (empty)"},
    {
        "role": "assistant",
        "content": "THOUGHT: The file is written, so the task is done.\n```bash\nsubmit\n```",
    },
)


# Repo tasks get a demonstrated fix instead: the shell demonstration's `echo ... > file`,
# copied by a 135M model into a repo task, overwrites a source file (so it solved no
# code-fix task: docs/benchmarks.md). One `sed -i 'Ns/old/new/' file` is the edit the easiest
# statements ask for ("In f.py line N, `old` must be `new`. The fix: sed -i ..."). It ends
# on the fix, not on `submit`: the model copies the last demonstrated reply (seen: with
# a closing `submit` turn most first replies were "The bug is fixed, so the task is done").
_REPO_DEMONSTRATION: tuple[dict[str, str], ...] = (
    {
        "role": "user",
        "content": "Task: total() subtracts instead of adding. In calc/sums.py line 4, `-` "
        "must be `+`. The fix: sed -i '4s/-/+/' calc/sums.py\n\nThe Python project is in "
        "the current directory. Find and fix the bug in its source code. Hidden tests (run "
        "with pytest) will check your fix; do not add tests.\nFiles: calc/__init__.py, "
        "calc/sums.py",
    },
    {
        "role": "assistant",
        "content": "THOUGHT: I change `-` to `+` on line 4 of calc/sums.py with sed."
        "\n```bash\nsed -i '4s/-/+/' calc/sums.py\n```",
    },
)


def demonstration(repo: bool = False) -> list[dict[str, str]]:
    return [dict(m) for m in (_REPO_DEMONSTRATION if repo else _DEMONSTRATION)]


def build_initial_messages(scenario: TaskLike) -> list[dict[str, str]]:
    """System prompt, one demonstrated exchange, then the user's task (OpenAI chat format)."""
    task = f"Task: {scenario.instruction.strip()}\n{_file_listing(scenario.files)}"
    return [
        {"role": "system", "content": system_prompt()},
        *demonstration(repo=getattr(scenario, "repo", None) is not None),
        {"role": "user", "content": task},
    ]
