"""`McpStdio`'s start message: defaults, caps and refusals (no process started)."""

from __future__ import annotations

import math

import pytest

from artfleet.v1 import sandbox_pb2 as pb
from artfleet_sandbox.backend import InvalidArgument
from artfleet_sandbox.stdio_rpc import (
    DEFAULT_IDLE_S,
    DEFAULT_STARTUP_S,
    MAX_IDLE_S,
    MAX_STARTUP_S,
    stdio_spec,
)


def test_zeros_are_the_defaults_and_values_pass_through() -> None:
    start = pb.StdioStart(image="img:1", args=["python3", "-m", "srv"], env={"K": "v"}, job_id="j")
    spec, startup, idle = stdio_spec(start)
    assert (startup, idle) == (DEFAULT_STARTUP_S, DEFAULT_IDLE_S)
    assert spec.image == "img:1" and spec.args == ("python3", "-m", "srv")
    assert dict(spec.env) == {"K": "v"} and spec.job_id == "j" and not spec.network


def test_timeouts_above_the_caps_are_clamped() -> None:
    _, startup, idle = stdio_spec(pb.StdioStart(startup_timeout_s=1e9, idle_timeout_s=1e9))
    assert (startup, idle) == (MAX_STARTUP_S, MAX_IDLE_S)


@pytest.mark.parametrize(
    "start",
    [
        pb.StdioStart(idle_timeout_s=-1),
        pb.StdioStart(startup_timeout_s=math.nan),
        pb.StdioStart(resources=pb.Resources(memory_bytes=-1)),
        pb.StdioStart(resources=pb.Resources(cpus=math.inf)),
        pb.StdioStart(args=["a\0b"]),
    ],
)
def test_bad_values_are_invalid_arguments(start: pb.StdioStart) -> None:
    with pytest.raises(InvalidArgument):
        stdio_spec(start)
