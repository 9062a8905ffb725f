"""Entrypoint helpers: parse settings (clear error, exit 2) and run a lifecycle object."""

from __future__ import annotations

import asyncio
import faulthandler
import importlib
import logging
import signal
import socket
import sys
import threading
from collections.abc import Callable
from typing import Protocol, TypeVar

from pydantic import ValidationError
from pydantic_settings import BaseSettings

from artfleet.runtime.config import CommonSettings
from artfleet.runtime.logs import setup_logging

log = logging.getLogger(__name__)

S = TypeVar("S", bound=BaseSettings)
C = TypeVar("C", bound=CommonSettings)


class Lifecycle(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


STACKS_SIGNAL = signal.SIGUSR1  # `run`'s services dump their threads' stacks on it

_handed_out: set[int] = set()
_handed_lock = threading.Lock()


def free_port() -> int:
    """A loopback port free now, never one this process handed out before (for a child
    process to bind; another process may still take it first).

    The kernel can give a port it just released to the next bind: a fleet that picks its
    ports one after another would then start two services on one port."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        with _handed_lock:
            if port not in _handed_out:
                _handed_out.add(port)
                return port


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
    """Starts `app`, waits for SIGTERM/SIGINT, then stops it (its stop() bounds the wait).

    A signal while it starts cancels the start and stops what had started: a start can take
    minutes (vLLM), and a supervisor that gives up on it must not leave its children behind
    (they run in their own sessions). A start that fails stops what it started too."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    starting = asyncio.ensure_future(app.start())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if starting.done():
            starting.result()  # a failed start raises here, after the stop below
            await stopping
            log.info("shutting down")
        else:
            log.info("stopping while starting")
    finally:
        stopping.cancel()
        starting.cancel()  # no-op once it is done
        await asyncio.gather(starting, return_exceptions=True)
        failed = not starting.cancelled() and starting.exception() is not None
        await _stop(app, failed=failed)


async def _stop(app: Lifecycle, *, failed: bool) -> None:
    if not failed:
        await app.stop()
        return
    try:  # after a failed start: the start's error is the one to report
        await app.stop()
    except Exception:
        log.exception("stopping after a failed start")


def run(app: Lifecycle) -> None:
    """`serve(app)`; then exits with the app's `exit_status` where it set one (non-zero:
    the app ended itself on a fault, e.g. inference's vLLM died), for its supervisor.
    SIGUSR1 writes every thread's stack to stderr (its log), even with the event loop
    stuck: a supervisor asks for it before it kills a service that outlived its grace."""
    faulthandler.register(STACKS_SIGNAL, all_threads=True)
    asyncio.run(serve(app))
    status = getattr(app, "exit_status", 0)
    if status:
        raise SystemExit(status)


def service_main(
    settings_cls: type[C], component: str, app: Callable[[C], Lifecycle] | str
) -> None:
    """A service's entrypoint: its settings (a clear error, exit 2), its logging, then its
    app made from them, run until a signal. `app` as "module:Name" is imported only then, so
    a bad setting fails before torch or vLLM load."""
    settings = load_settings(settings_cls)
    setup_logging(settings.log_level, component)
    if isinstance(app, str):
        module, _, name = app.partition(":")
        build: Callable[[C], Lifecycle] = getattr(importlib.import_module(module), name)
    else:
        build = app
    run(build(settings))
