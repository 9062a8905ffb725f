"""The built-in toolbox for sandboxed work: `bash`, a SWE-agent style file `editor`, `submit`.

The editor works through the workspace's file calls (read/write), so it behaves the same on
every sandbox backend. Its mistakes (a missing file, an ambiguous replace) are tool results
the model reads, as SWE agents' editors answer; only a lost workspace raises.
"""

from __future__ import annotations

import time
from typing import Any

from artfleet_rollout import metrics
from artfleet_rollout.agents.terminal import format_observation
from artfleet_rollout.ports import ToolResult, Workspace, WorkspaceLost

from .toolcalls import parse_arguments

NAMES = ("bash", "editor", "submit")

_SCHEMAS: dict[str, dict[str, Any]] = {
    "bash": {
        "description": "Run one shell command in the task's directory; returns its output.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "the command"}},
            "required": ["command"],
        },
    },
    "editor": {
        "description": "View, create or edit a text file. view: the file with line numbers "
        "(view_range [first, last] optional); create: write file_text; str_replace: replace "
        "old_str (must occur exactly once) with new_str; insert: new_str after line "
        "insert_line (0 = at the top).",
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert"]},
                "path": {"type": "string"},
                "file_text": {"type": "string"},
                "old_str": {"type": "string"},
                "new_str": {"type": "string"},
                "insert_line": {"type": "integer"},
                "view_range": {"type": "array", "items": {"type": "integer"}},
            },
            "required": ["command", "path"],
        },
    },
    "submit": {
        "description": "Call when the task is done; ends the episode.",
        "parameters": {"type": "object", "properties": {}},
    },
}


def tool_schemas(names: tuple[str, ...] = NAMES) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": n, **_SCHEMAS[n]}} for n in names]


class EditorError(ValueError):
    """A mistake in an editor call: its message is the tool result."""


class SandboxToolbox:
    def __init__(self, workspace: Workspace, *, exec_timeout_s: float) -> None:
        self._workspace = workspace
        self._exec_timeout_s = exec_timeout_s

    def tools(self) -> list[dict[str, Any]]:
        return tool_schemas()

    async def call(self, name: str, arguments: str) -> ToolResult:
        try:
            args = parse_arguments(arguments)
            if name == "submit":
                return ToolResult("Submitted.", done=True)
            if name == "bash":
                return await self._bash(_str(args, "command"))
            return ToolResult(await self._edit(args))
        except (ValueError, EditorError) as exc:
            return ToolResult(f"Error: {exc}", ok=False)

    async def close(self) -> None:
        """The workspace outlives the toolbox: the scenario's check runs in it afterwards."""

    async def _bash(self, command: str) -> ToolResult:
        start = time.perf_counter()
        result = await self._workspace.exec(command, timeout_s=self._exec_timeout_s)
        metrics.SANDBOX_SECONDS.observe(time.perf_counter() - start)
        # No cut here: the loop cuts over-long results and counts them.
        text = format_observation(
            result.exit_code, result.stdout, result.stderr, result.timed_out, 0
        )
        return ToolResult(text, command=command, exec=result)

    async def _edit(self, args: dict[str, Any]) -> str:
        command, path = _str(args, "command"), _path(_str(args, "path"))
        if command == "create":
            await self._workspace.write_files({path: _str(args, "file_text", empty=True)})
            return f"Created {path}."
        text = await self._read(path)
        if command == "view":
            return view(text, args.get("view_range"))
        if command == "str_replace":
            new = replace_once(text, _str(args, "old_str"), _str(args, "new_str", empty=True))
        elif command == "insert":
            new = insert_after(text, args.get("insert_line"), _str(args, "new_str", empty=True))
        else:
            raise EditorError(f"unknown editor command {command!r}")
        await self._workspace.write_files({path: new})
        return f"Edited {path}.\n{view(new, None)}"

    async def _read(self, path: str) -> str:
        try:
            return (await self._workspace.read_file(path)).decode("utf-8", errors="replace")
        except WorkspaceLost:
            raise
        except Exception:  # the sandbox's NOT_FOUND and friends: the model named a bad path
            raise EditorError(f"cannot read {path}: no such file") from None


def _str(args: dict[str, Any], key: str, *, empty: bool = False) -> str:
    value = args.get(key)
    if not isinstance(value, str) or (not empty and not value):
        raise EditorError(f"argument {key!r} is required, a {'' if empty else 'non-empty '}string")
    return value


def _path(path: str) -> str:
    # Files stay inside the workspace, as the sandbox's file calls require.
    clean = path.removeprefix("./")
    if clean.startswith("/") or ".." in clean.split("/"):
        raise EditorError(f"path {path!r} must be relative to the task's directory")
    return clean


def view(text: str, view_range: Any) -> str:
    lines = text.splitlines()
    first, last = 1, len(lines)
    if view_range is not None:
        if (
            not isinstance(view_range, list)
            or len(view_range) != 2
            or not all(isinstance(n, int) for n in view_range)
        ):
            raise EditorError("view_range must be [first_line, last_line]")
        first, last = view_range[0], len(lines) if view_range[1] == -1 else view_range[1]
        if not 1 <= first <= max(last, 1) or last > len(lines):
            raise EditorError(f"view_range {view_range} is outside the file's {len(lines)} lines")
    numbered = [f"{n:6}\t{lines[n - 1]}" for n in range(first, last + 1)]
    return "\n".join(numbered) if numbered else "(empty file)"


def replace_once(text: str, old: str, new: str) -> str:
    count = text.count(old)
    if count != 1:
        found = "does not occur" if count == 0 else f"occurs {count} times"
        raise EditorError(f"old_str {found} in the file; it must occur exactly once")
    return text.replace(old, new, 1)


def insert_after(text: str, line: Any, new: str) -> str:
    lines = text.splitlines(keepends=True)
    if not isinstance(line, int) or isinstance(line, bool) or not 0 <= line <= len(lines):
        raise EditorError(f"insert_line must be an integer from 0 to {len(lines)}")
    if line and not lines[line - 1].endswith("\n"):
        lines[line - 1] += "\n"
    addition = new if new.endswith("\n") else new + "\n"
    return "".join([*lines[:line], addition, *lines[line:]])
