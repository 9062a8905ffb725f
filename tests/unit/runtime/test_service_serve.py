"""`artfleet.runtime.service`: a signal while the app starts stops what had started; a
service's entrypoint parses its settings before it imports its app."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import pytest

from artfleet.runtime import service
from artfleet.runtime.config import CommonSettings
from artfleet.runtime.service import free_port, serve, service_main


class SlowStart:
    """Starts a child-like resource, then waits (as vLLM's readiness wait does)."""

    def __init__(self, *, fail: bool = False, signal_at_start: bool = True) -> None:
        self.events: list[str] = []
        self.fail = fail
        self.signal_at_start = signal_at_start
        self.started = asyncio.Event()

    async def start(self) -> None:
        self.events.append("spawned")
        if self.fail:
            raise RuntimeError("the engine did not start")
        if self.signal_at_start:
            os.kill(os.getpid(), signal.SIGTERM)  # the supervisor gives up while we start
            await asyncio.Event().wait()  # never ready
        self.events.append("started")
        self.started.set()

    async def stop(self) -> None:
        self.events.append("stopped")


def test_a_signal_while_starting_cancels_the_start_and_stops() -> None:
    app = SlowStart()
    asyncio.run(asyncio.wait_for(serve(app), 30))
    assert app.events == ["spawned", "stopped"]


def test_a_started_app_stops_on_a_signal() -> None:
    app = SlowStart(signal_at_start=False)

    async def main() -> None:
        task = asyncio.ensure_future(serve(app))
        await app.started.wait()
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.wait_for(task, 30)

    asyncio.run(main())
    assert app.events == ["spawned", "started", "stopped"]


def test_a_failed_start_stops_what_it_started_and_raises() -> None:
    app = SlowStart(fail=True)
    with pytest.raises(RuntimeError, match="did not start"):
        asyncio.run(serve(app))
    assert app.events == ["spawned", "stopped"]


def test_free_port_never_hands_out_a_port_twice() -> None:
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)


def test_a_bad_setting_exits_2_before_the_app_is_imported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ARTFLEET_API_TOKEN", "changeme")
    with pytest.raises(SystemExit) as exited:  # an import would raise ModuleNotFoundError
        service_main(CommonSettings, "test", "no_such_module_here:App")
    assert exited.value.code == 2
    assert "ARTFLEET_API_TOKEN" in capsys.readouterr().err


def test_the_entrypoint_imports_a_named_app_and_runs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARTFLEET_API_TOKEN", "a-real-secret")
    logging_set: list[tuple[str, str]] = []  # not the real one: it replaces pytest's handlers
    monkeypatch.setattr(service, "setup_logging", lambda *args: logging_set.append(args))
    made: list[SlowStart] = []

    def build(settings: CommonSettings) -> SlowStart:
        made.append(SlowStart())  # its start sends the SIGTERM that stops it
        return made[-1]

    monkeypatch.setattr(sys.modules[__name__], "build_app", build, raising=False)
    service_main(CommonSettings, "test", f"{__name__}:build_app")
    assert logging_set == [("INFO", "test")]
    assert made[0].events == ["spawned", "stopped"]


class EndsItself(SlowStart):
    """Ends itself on a fault, as inference does when vLLM dies: a status, then a signal."""

    async def start(self) -> None:
        await super().start()
        self.exit_status = 137
        os.kill(os.getpid(), signal.SIGTERM)


def test_an_app_that_ended_itself_exits_with_its_status() -> None:
    app = EndsItself(signal_at_start=False)
    with pytest.raises(SystemExit) as exited:
        service.run(app)
    assert exited.value.code == 137 and app.events == ["spawned", "started", "stopped"]
    service.run(SlowStart())  # no status set: returns (exit 0)
