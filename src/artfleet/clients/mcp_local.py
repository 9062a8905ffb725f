"""Local stdio MCP servers, as the rollout's MCP agent and the reward's `mcp_evaluate` start
them: our own console scripts found without PATH, and the server's stderr kept so that a
server that does not start can say why in the error the user sees.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from mcp import StdioServerParameters

STDERR_TAIL_CHARS = 400


def resolve_command(command: str, path: str | None = None) -> str:
    """`command` as the OS will run it. A bare name that is not on PATH but is a script
    installed beside this interpreter becomes that script's path: a fleet started as
    `.venv/bin/artfleet fleet up` runs with the virtualenv's bin off PATH, and the bundled
    `artfleet-mcp-2048` lives there."""
    if os.sep in command or shutil.which(command, path=path):
        return command
    for directory in (Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))):
        candidate = directory / command
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return command


def server_params(
    command: str, args: Sequence[str], env: Mapping[str, str] | None, cwd: str | None
) -> StdioServerParameters:
    """A local stdio server as the MCP SDK starts it; its command resolved (resolve_command)
    on the PATH it will run with."""
    env = dict(env) if env else None
    return StdioServerParameters(
        command=resolve_command(command, (env or {}).get("PATH")), args=list(args), env=env, cwd=cwd
    )


class ServerStderr:
    """A temporary file a server's stderr goes to (the SDK needs a real file descriptor);
    `tail()` is its last lines for an error message."""

    def __init__(self) -> None:
        # Closed by close() / __exit__: the owner decides how long it lives.
        self.file = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115

    def tail(self, limit: int = STDERR_TAIL_CHARS) -> str:
        if self.file.closed:
            return ""
        fd = self.file.fileno()
        size = os.fstat(fd).st_size
        # pread leaves the offset the server's copy of the descriptor shares alone.
        data = os.pread(fd, limit, max(0, size - limit)).decode(errors="replace")
        lines = [line.strip() for line in data.splitlines() if line.strip()]
        if size > limit and lines:
            lines[0] = f"...{lines[0]}"
        return " | ".join(lines)

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> ServerStderr:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
