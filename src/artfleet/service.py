"""Entrypoint helpers: parse settings (clear error, exit 2) and run a lifecycle object."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sys
from typing import Protocol, TypeVar

from pydantic import ValidationError
from pydantic_settings import BaseSettings

log = logging.getLogger(__name__)

S = TypeVar("S", bound=BaseSettings)


class Lifecycle(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def free_port() -> int:
    """A loopback port free now (for a child process to bind; another may take it first)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load_settings(cls: type[S]) -> S:
    try:
        return cls()
    except ValidationError as exc:
        for error in exc.errors():
            field = ".".join(str(p) for p in error["loc"])
            env = f"ARTFLEET_{field.upper()}" if field else "settings"
            print(f"configuration error: {env}: {error['msg']}", file=sys.stderr)
        raise SystemExit(2) from None


async def serve(app: Lifecycle) -> None:
    """Starts `app`, waits for SIGTERM/SIGINT, then stops it (its stop() bounds the wait)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await app.start()
    try:
        await stop.wait()
        log.info("shutting down")
    finally:
        await app.stop()


def run(app: Lifecycle) -> None:
    asyncio.run(serve(app))
