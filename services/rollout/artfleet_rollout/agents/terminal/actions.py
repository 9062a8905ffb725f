"""Parses one assistant turn into an action.

The format (as in the terminal-agent samples our users know) is `THOUGHT: ...` followed by
exactly one fenced bash block. Anything else is an `invalid` action whose `error` is sent
back to the model as the observation, so it says precisely what the format is.

Limits, on purpose: fences are found line by line (a fence must start its own line), so a
command whose text itself contains a line starting with three backticks (a heredoc writing
Markdown) is read as several blocks. Text after the closing fence is ignored, as
mini-swe-agent style agents do, because small models often add a closing remark.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

ActionKind = Literal["bash", "submit", "invalid"]

SUBMIT_COMMAND = "submit"
SHELL_LANGUAGES = frozenset({"bash", "sh"})
FENCE = "```"

FORMAT_HELP = (
    "Reply with exactly:\n"
    "THOUGHT: <your reasoning>\n"
    "```bash\n"
    "<one command>\n"
    "```\n"
    "When the task is done, reply with the command: submit"
)

# Reasoning models (Qwen3) wrap hidden reasoning in <think> tags; it is not part of the
# visible turn, so a THOUGHT or a fence inside it must not count.
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_THOUGHT = re.compile(r"^[ \t]*THOUGHT:", re.MULTILINE)


@dataclass(frozen=True)
class Action:
    """What the model asked for. `error` is set only for `invalid` actions."""

    kind: ActionKind
    command: str = ""
    thought: str = ""
    error: str = ""

    @property
    def valid(self) -> bool:
        return self.kind != "invalid"


@dataclass(frozen=True)
class _Block:
    language: str
    body: str
    start: int  # offset of the opening fence, to check that THOUGHT comes before it


def _fenced_blocks(text: str) -> tuple[list[_Block], bool]:
    """Returns the fenced blocks and whether the last one was left open."""
    blocks: list[_Block] = []
    language: str | None = None
    body: list[str] = []
    start = offset = 0
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith(FENCE):
            if language is not None:
                blocks.append(_Block(language, "".join(body), start))
                language = None
                if stripped == FENCE:
                    offset += len(line)
                    continue
            # An opening fence. Inside a block, a fence with an info string (```bash) both
            # ends it and opens another: the model started a second block.
            language, body, start = stripped[len(FENCE) :].strip().lower(), [], offset
        elif language is not None:
            body.append(line)
        offset += len(line)
    if language is not None:
        blocks.append(_Block(language, "".join(body), start))
        return blocks, True
    return blocks, False


def _invalid(reason: str, thought: str = "") -> Action:
    return Action(kind="invalid", thought=thought, error=f"Format error: {reason}.\n{FORMAT_HELP}")


def parse_action(text: str) -> Action:
    """Reads `THOUGHT: ...` + exactly one ```bash (or ```sh) block; `submit` ends the episode."""
    visible = _THINK.sub("", text or "")
    blocks, unclosed = _fenced_blocks(visible)
    if not blocks:
        return _invalid("no ```bash code block found")
    if len(blocks) > 1:
        return _invalid(f"found {len(blocks)} code blocks, send exactly one")
    block = blocks[0]
    if unclosed:
        return _invalid("the code block is not closed with ```")
    thought_match = None
    for match in _THOUGHT.finditer(visible, 0, block.start):
        thought_match = match  # the last THOUGHT before the block is the one that leads to it
    if thought_match is None:
        return _invalid("start your reply with THOUGHT: before the code block")
    thought = visible[thought_match.end() : block.start].strip()
    if block.language not in SHELL_LANGUAGES:
        shown = block.language or "no language"
        return _invalid(f"the code block must be ```bash, not {shown}", thought)
    command = block.body.strip()
    if not command:
        return _invalid("the bash block is empty", thought)
    if command == SUBMIT_COMMAND:
        return Action(kind="submit", command=command, thought=thought)
    return Action(kind="bash", command=command, thought=thought)
