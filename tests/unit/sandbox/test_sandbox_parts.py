"""Pure pieces of the sandbox: output capture, path rules, JUnit parsing, settings."""

from __future__ import annotations

import os
import subprocess

import pytest
from pydantic import SecretStr, ValidationError

from artfleet_sandbox.backend import InvalidArgument, InvalidPath
from artfleet_sandbox.factory import build_servicer
from artfleet_sandbox.junit import parse_junit
from artfleet_sandbox.local_backend import LocalBackend
from artfleet_sandbox.paths import clean_relpath
from artfleet_sandbox.procs import TAG_VAR, Capture, _tagged_pids
from artfleet_sandbox.servicer import _clamp
from artfleet_sandbox.settings import SandboxSettings

TOKEN = "a-real-test-token-1234"


def test_capture_keeps_the_head_and_counts_the_rest() -> None:
    capture = Capture(5)
    for chunk in (b"abc", b"defgh", b"ij"):
        capture.feed(chunk)
    assert capture.value() == b"abcde" and capture.truncated and capture.total == 10


def test_capture_with_a_tail_marks_what_it_left_out() -> None:
    capture = Capture(3, tail=4)
    for chunk in (b"012", b"3456", b"789", b"AB"):
        capture.feed(chunk)
    assert capture.value() == b"012\n[... 5 bytes omitted ...]\n89AB"
    exact = Capture(3, tail=4)
    exact.feed(b"0123456")
    assert exact.value() == b"0123456" and not exact.truncated


@pytest.mark.parametrize(
    ("path", "expected"),
    [("a/b.txt", "a/b.txt"), ("./a//b/", "a/b"), ("a/./b", "a/b"), ("..foo", "..foo")],
)
def test_clean_relpath_normalises(path: str, expected: str) -> None:
    assert clean_relpath(path) == expected


@pytest.mark.parametrize("path", ["", "/abs", "..", "a/../b", "a\0b", "../../etc/passwd"])
def test_clean_relpath_refuses(path: str) -> None:
    with pytest.raises(InvalidPath):
        clean_relpath(path)


def test_parse_junit_outcomes() -> None:
    xml = b"""<?xml version="1.0"?>
    <testsuites><testsuite name="pytest">
      <testcase classname="t.test_a" name="test_ok" time="0.5"/>
      <testcase classname="t.test_a" name="test_fail" time="x">
        <failure message="assert 1 == 2">long traceback</failure>
        <error message="teardown broke"/>
      </testcase>
      <testcase classname="t.test_a" name="test_err"><error>setup broke</error></testcase>
      <testcase classname="" name="t.test_b"><error message="collection failure"/></testcase>
      <testcase classname="t.test_a" name="test_skip">
        <skipped type="pytest.skip" message="later"/>
      </testcase>
    </testsuite></testsuites>"""
    cases = parse_junit(xml)
    assert [(c.name, c.outcome, c.message) for c in cases] == [
        ("t.test_a::test_ok", "passed", ""),
        ("t.test_a::test_fail", "failed", "assert 1 == 2"),
        ("t.test_a::test_err", "errored", "setup broke"),
        ("t.test_b", "errored", "collection failure"),
        ("t.test_a::test_skip", "skipped", "later"),
    ]
    assert cases[0].duration_s == 0.5 and cases[1].duration_s == 0.0


def test_parse_junit_tolerates_garbage() -> None:
    assert parse_junit(b"not xml <") == []
    assert parse_junit(b"<testsuite/>") == []


def test_clamp_defaults_caps_and_refuses() -> None:
    assert _clamp(0, 60, 600, "t") == 60
    assert _clamp(10, 60, 600, "t") == 10
    assert _clamp(1e9, 60, 600, "t") == 600
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidArgument):
            _clamp(bad, 60, 600, "t")


def test_settings_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARTFLEET_API_TOKEN", TOKEN)
    monkeypatch.setenv("ARTFLEET_MAX_TIMEOUT_S", "120")
    monkeypatch.setenv("ARTFLEET_USE_BWRAP", "never")
    monkeypatch.setenv("ARTFLEET_BWRAP_EXPOSE_PATHS", '["/opt/python"]')
    settings = SandboxSettings()  # type: ignore[call-arg]  # the token comes from the env
    assert settings.max_timeout_s == 120 and settings.use_bwrap == "never"
    assert settings.bwrap_expose_paths == ["/opt/python"]
    assert settings.sandbox_backend == "auto"


def test_settings_defaults_follow_caps_and_bad_values_fail() -> None:
    settings = SandboxSettings(api_token=SecretStr(TOKEN), max_timeout_s=10, max_output_bytes=1000)
    assert settings.default_timeout_s == 10 and settings.default_output_bytes == 1000
    with pytest.raises(ValidationError):
        SandboxSettings(api_token=SecretStr(TOKEN), max_timeout_s=-1)
    with pytest.raises(ValidationError):
        SandboxSettings(api_token=SecretStr(TOKEN), use_bwrap="sometimes")  # type: ignore[arg-type]


def test_build_servicer_wires_limits() -> None:
    settings = SandboxSettings(
        api_token=SecretStr(TOKEN), max_timeout_s=42, use_bwrap="never", sandbox_backend="local"
    )
    servicer, backend = build_servicer(settings)
    assert servicer.backend is backend and servicer.limits.max_timeout_s == 42
    assert servicer.limits.default_timeout_s == 42
    assert isinstance(backend, LocalBackend) and backend.config.use_bwrap == "never"


def test_tagged_processes_are_found_by_their_variable_only() -> None:
    tag = f"{TAG_VAR}=t{os.getpid()}."
    first = subprocess.Popen(["sleep", "60"], env={TAG_VAR: f"t{os.getpid()}.a"})
    later = subprocess.Popen(["sleep", "60"], env={"A": "1", TAG_VAR: f"t{os.getpid()}.b"})
    decoy = subprocess.Popen(["sleep", "60"], env={"OTHER": tag, "X": f"y{tag}"})
    try:
        assert sorted(_tagged_pids(tag.encode())) == sorted([first.pid, later.pid])
    finally:
        for proc in (first, later, decoy):
            proc.kill()
            proc.wait()
