"""A fleet process that outlives its stop's grace leaves its threads' stacks in its log
before the SIGKILL: a trainer whose event loop hung in CI left nothing to say where."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from waiting import wait_for

from artfleet_cli.fleet import LocalFleet

# A service (artfleet.runtime.service.run) whose start blocks its event loop, as a hung
# call would: SIGTERM cannot reach its handler.
HUNG_SERVICE = """
import time
from artfleet.runtime.service import run

class Hung:
    async def start(self):
        print("blocking the loop", flush=True)
        stuck_in_a_blocking_call()

    async def stop(self):
        pass

def stuck_in_a_blocking_call():
    while True:
        time.sleep(1)

run(Hung())
"""


def test_a_service_killed_past_its_grace_leaves_its_stacks_in_its_log(tmp_path: Path) -> None:
    fleet = LocalFleet(tmp_path, api=False)
    (tmp_path / "logs").mkdir()  # what start() makes
    fleet._spawn(
        "hung", [sys.executable, "-c", HUNG_SERVICE], env={"PYTHONPATH": ":".join(sys.path)}
    )
    log = tmp_path / "logs" / "hung.log"
    wait_for("the service blocks its loop", lambda: log.exists() and "blocking" in log.read_text())

    codes = fleet.stop(grace_s=0.5)

    assert codes == {"hung": -signal.SIGKILL}
    tail = fleet.killed_logs["hung"]
    assert "most recent call first" in tail and "stuck_in_a_blocking_call" in tail, tail


def test_a_service_that_stops_in_its_grace_leaves_no_killed_log(tmp_path: Path) -> None:
    fleet = LocalFleet(tmp_path, api=False)
    (tmp_path / "logs").mkdir()  # what start() makes
    fleet._spawn("quick", [sys.executable, "-c", "import time; time.sleep(60)"], env={})

    assert fleet.stop(grace_s=30) == {"quick": -signal.SIGTERM}
    assert fleet.killed_logs == {}
