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


def build_initial_messages(scenario: TaskLike) -> list[dict[str, str]]:
    """System prompt + the user's task, in OpenAI chat format."""
    task = f"Task: {scenario.instruction.strip()}\n{_file_listing(scenario.files)}"
    return [
        {"role": "system", "content": system_prompt()},
        {"role": "user", "content": task},
    ]
