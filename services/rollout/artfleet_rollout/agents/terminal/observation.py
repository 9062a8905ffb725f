"""Turns a command's outcome into the text the model sees next.

The policy may be a 135M model with a context budget of a few thousand tokens, so each
stream is cut to `max_chars`, keeping its head and its tail: the head shows what the
command started doing, the tail holds the error or the final result.
"""

from __future__ import annotations


def _text(value: str | bytes) -> str:
    # Sandboxes may hand back raw bytes; a model only ever sees text.
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def truncate_middle(text: str, max_chars: int) -> str:
    """Keeps `max_chars` characters (head + tail) and says how many were cut.

    `max_chars <= 0` means no limit (an unset proto field reads as 0). The marker itself is
    not counted in `max_chars`.
    """
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    head = max_chars // 2
    tail = max_chars - head
    cut = len(text) - max_chars
    return f"{text[:head]}\n[... {cut} chars cut ...]\n{text[len(text) - tail :]}"


def _section(name: str, value: str | bytes, max_chars: int) -> str:
    text = _text(value).rstrip("\n")
    if not text:
        return f"{name}: (empty)"
    return f"{name}:\n{truncate_middle(text, max_chars)}"


def format_observation(
    exit_code: int,
    stdout: str | bytes,
    stderr: str | bytes,
    timed_out: bool,
    max_chars: int,
) -> str:
    """The observation after a command: exit code, then stdout and stderr, each truncated."""
    status = f"exit_code: {exit_code}"
    if timed_out:
        status += " (timed out: the command was stopped)"
    return "\n".join(
        [status, _section("stdout", stdout, max_chars), _section("stderr", stderr, max_chars)]
    )
