"""The local backend with real processes: exec, limits, files, tests, lifecycle."""

from __future__ import annotations

import asyncio
import os
import resource
import secrets
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import REGISTRY

from artfleet_sandbox.backend import (
    CapacityExceeded,
    ExecSpec,
    FileSpec,
    InvalidArgument,
    InvalidPath,
    PathNotFound,
    SandboxError,
    SessionElsewhere,
    SessionNotFound,
    SessionSpec,
)
from artfleet_sandbox.local_backend import LocalBackend
from artfleet_sandbox.local_backend.config import ISOLATION_BWRAP, ISOLATION_NONE, LocalConfig
from artfleet_sandbox.procs import TAG_VAR, rlimit_prefix, run_process

pytestmark = pytest.mark.timeout(120)


def spec(
    command: str, timeout_s: float = 20, max_output_bytes: int = 65536, **kw: object
) -> ExecSpec:
    return ExecSpec(command, timeout_s=timeout_s, max_output_bytes=max_output_bytes, **kw)  # type: ignore[arg-type]


async def new_session(backend: LocalBackend, **kw: object) -> str:
    info = await backend.create_session(SessionSpec(**kw))  # type: ignore[arg-type]
    return info.session_id


def _alive(pid: int) -> bool:
    """Running or sleeping; a zombie is dead (it only waits for its parent to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _pids_running(marker: str) -> list[int]:
    """Live processes whose command line mentions `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except OSError:
            continue
        if marker.encode() in cmdline and _alive(int(entry)):
            found.append(int(entry))
    return found


async def _gone(marker: str, wait_s: float = 30.0) -> bool:
    # A deadline, not an expectation: a loaded machine may take seconds to reap.
    deadline = time.monotonic() + wait_s
    while _pids_running(marker):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def _unique_sleep() -> str:
    """A `sleep` argument no other process on the machine uses, to find ours by cmdline."""
    return f"{300 + secrets.randbelow(10**6) / 10**3:.3f}"


# -- exec ----------------------------------------------------------------------------


async def test_exec_stdout_stderr_exit_code(backend: LocalBackend) -> None:
    sid = await new_session(backend)
    out = await backend.exec(sid, spec("echo out; echo err >&2; exit 3"))
    assert (out.exit_code, out.stdout, out.stderr) == (3, b"out\n", b"err\n")
    assert not out.timed_out and not out.stdout_truncated and out.duration_s > 0


async def test_exit_code_of_a_signal_follows_the_shell_convention(backend: LocalBackend) -> None:
    sid = await new_session(backend)
    assert (await backend.exec(sid, spec("kill -9 $$"))).exit_code == 128 + 9


async def test_stdin_is_fed_and_absent_stdin_is_eof(backend: LocalBackend) -> None:
    sid = await new_session(backend)
    assert (await backend.exec(sid, spec("cat | tr a-z A-Z", stdin=b"abc"))).stdout == b"ABC"
    # No stdin: `cat` must see EOF at once rather than wait for the timeout.
    out = await backend.exec(sid, spec("cat; echo done", timeout_s=5))
    assert out.stdout == b"done\n" and not out.timed_out


async def test_env_is_clean_and_layered(
    backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARTFLEET_API_TOKEN", "server-secret-do-not-leak")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "another-server-secret")
    sid = await new_session(backend, env={"A": "session", "B": "session"})
    out = await backend.exec(sid, spec("env", env={"B": "exec"}))
    env = dict(line.split("=", 1) for line in out.stdout.decode().splitlines())
    assert "ARTFLEET_API_TOKEN" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert b"server-secret" not in out.stdout
    assert env["A"] == "session" and env["B"] == "exec"
    assert env["HOME"].endswith("/home") and env["TMPDIR"].endswith("/tmp")


async def test_invalid_env_and_empty_command_are_refused(backend: LocalBackend) -> None:
    with pytest.raises(InvalidArgument):
        await new_session(backend, env={"BAD=NAME": "x"})
    sid = await new_session(backend)
    with pytest.raises(InvalidArgument):
        await backend.exec(sid, spec("   "))
    with pytest.raises(InvalidArgument):
        await backend.exec(sid, spec("true", env={"": "x"}))


async def test_cwd_is_relative_to_the_workspace(backend: LocalBackend) -> None:
    info = await backend.create_session(SessionSpec(files=[FileSpec("sub/dir/f.txt", b"x")]))
    out = await backend.exec(info.session_id, spec("pwd; ls", cwd="sub/dir"))
    assert out.stdout == f"{info.workdir}/sub/dir\nf.txt\n".encode()
    for bad in ("..", "/etc", "missing", "sub/dir/f.txt"):
        with pytest.raises(InvalidPath):
            await backend.exec(info.session_id, spec("pwd", cwd=bad))


async def test_timeout_kills_the_whole_tree(backend: LocalBackend) -> None:
    sid = await new_session(backend)
    nap = _unique_sleep()
    # A shell and children that ignore SIGTERM, one of them escaping the process group.
    command = (
        "trap '' TERM; "
        f"(trap '' TERM; sleep {nap}) & echo $! >> pids; "
        f"setsid sleep {nap} & echo $! >> pids; "
        "python -c 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"time.sleep({nap})' & echo $! >> pids; "
        "echo $$ >> pids; echo started; wait"
    )
    started = time.monotonic()
    out = await backend.exec(sid, spec(command, timeout_s=1.5))
    assert out.timed_out and out.exit_code == -1
    assert out.stdout == b"started\n"  # output before the kill is kept
    assert time.monotonic() - started < 10
    assert await _gone(nap), f"survivors: {_pids_running(nap)}"
    if backend.isolation() == ISOLATION_NONE:  # pids are host pids only outside bwrap
        pids, _ = await backend.read_file(sid, "pids", 4096)
        assert [int(p) for p in pids.split() if _alive(int(p))] == []


async def test_huge_output_is_capped_fast(backend: LocalBackend) -> None:
    sid = await new_session(backend)
    started = time.monotonic()
    out = await backend.exec(
        sid, spec("head -c 200000000 /dev/zero; echo tail >&2", max_output_bytes=1000)
    )
    assert time.monotonic() - started < 15
    assert out.exit_code == 0 and not out.timed_out
    assert out.stdout == b"\0" * 1000 and out.stdout_truncated
    assert out.stderr == b"tail\n" and not out.stderr_truncated


async def test_endless_output_until_timeout_stays_capped(backend: LocalBackend) -> None:
    sid = await new_session(backend)
    out = await backend.exec(sid, spec("yes", timeout_s=1, max_output_bytes=10))
    assert out.timed_out and out.stdout == b"y\ny\ny\ny\ny\n" and out.stdout_truncated


async def test_background_child_does_not_hold_exec_open(backend: LocalBackend) -> None:
    sid = await new_session(backend)
    nap = _unique_sleep()
    started = time.monotonic()
    out = await backend.exec(sid, spec(f"sleep {nap} & echo started", timeout_s=30))
    assert out.stdout == b"started\n" and not out.timed_out
    assert time.monotonic() - started < 5
    await backend.close_session(sid)
    assert await _gone(nap)  # whatever a session left running ends with it


async def test_rlimit_fsize_stops_huge_files(backend_factory: Callable[..., LocalBackend]) -> None:
    async with backend_factory(rlimits={resource.RLIMIT_FSIZE: 1 << 20}) as backend:
        sid = await new_session(backend)
        out = await backend.exec(sid, spec("head -c 2000000 /dev/zero > big"))
        assert out.exit_code != 0
        assert (await backend.exec(sid, spec("stat -c %s big"))).stdout == b"1048576\n"


PRLIMIT = shutil.which("prlimit")
needs_prlimit = pytest.mark.skipif(PRLIMIT is None, reason="util-linux prlimit missing")


@pytest.mark.parametrize(
    "prlimit",
    [
        pytest.param(None, id="python-launcher"),
        pytest.param(PRLIMIT, id="prlimit", marks=needs_prlimit),
    ],
)
async def test_each_launcher_sets_soft_and_hard_limits(prlimit: str | None, tmp_path: Path) -> None:
    # RLIMIT_NOFILE also has an alias, RLIMIT_OFILE, that prlimit does not know.
    prefix = rlimit_prefix({resource.RLIMIT_NOFILE: 1000, resource.RLIMIT_CPU: 99}, prlimit)
    out = await run_process(
        [
            "/bin/sh",
            "-c",
            "echo $(ulimit -Sn) $(ulimit -Hn) $(ulimit -St) $(ulimit -Ht) $(ulimit -c)",
        ],
        cwd=str(tmp_path),
        env={"PATH": "/usr/bin:/bin", TAG_VAR: f"{secrets.token_hex(8)}.x"},
        timeout_s=20,
        max_output_bytes=1024,
        argv_prefix=prefix,
    )
    assert out.stdout == b"1000 1000 99 99 0\n", out.stderr


@needs_prlimit
def test_limits_go_through_prlimit_where_the_host_has_it() -> None:
    # An interpreter start per command (and per REPL shell) costs more than prlimit.
    assert rlimit_prefix({resource.RLIMIT_NOFILE: 1000})[0] == PRLIMIT


# -- files ---------------------------------------------------------------------------


async def test_write_and_read_files(backend: LocalBackend) -> None:
    sid = await new_session(backend, files=[FileSpec("run.sh", b"#!/bin/sh\necho ran\n", 0o755)])
    payload = bytes(range(256)) * 10
    assert await backend.write_files(sid, [FileSpec("a/b/c.bin", payload)]) == 1
    assert await backend.read_file(sid, "a/b/c.bin", 1 << 20) == (payload, False)
    assert await backend.read_file(sid, "./a//b/c.bin", 5) == (payload[:5], True)
    assert (await backend.exec(sid, spec("./run.sh; stat -c %a a/b/c.bin"))).stdout == (
        b"ran\n644\n"
    )


async def test_setuid_bits_from_clients_are_dropped(backend: LocalBackend) -> None:
    sid = await new_session(backend, files=[FileSpec("x", b"", 0o4777)])
    assert (await backend.exec(sid, spec("stat -c %a x"))).stdout == b"777\n"


@pytest.mark.parametrize("path", ["", "..", "../x", "a/../../x", "/etc/passwd", "a\0b"])
async def test_bad_paths_are_refused(backend: LocalBackend, path: str) -> None:
    sid = await new_session(backend)
    with pytest.raises(InvalidPath):
        await backend.write_files(sid, [FileSpec(path, b"x")])
    with pytest.raises(InvalidPath):
        await backend.read_file(sid, path, 10)


async def test_symlink_escapes_are_refused(backend: LocalBackend) -> None:
    sid = await new_session(backend)
    await backend.exec(sid, spec("mkdir inner && ln -s /etc out && ln -s inner in"))
    await backend.exec(sid, spec("ln -s /etc/hostname leak && ln -s ../.. up"))
    for path in ("out/x", "leak", "up/etc/hostname"):
        with pytest.raises(InvalidPath):
            await backend.write_files(sid, [FileSpec(path, b"x")])
        with pytest.raises(InvalidPath):
            await backend.read_file(sid, path, 10)
    # A link that stays inside the workspace is fine.
    await backend.write_files(sid, [FileSpec("in/f.txt", b"inside")])
    assert await backend.read_file(sid, "inner/f.txt", 100) == (b"inside", False)


async def test_reading_odd_files(backend: LocalBackend) -> None:
    sid = await new_session(backend)
    await backend.exec(sid, spec("mkdir d && mkfifo pipe"))
    with pytest.raises(PathNotFound):
        await backend.read_file(sid, "missing.txt", 10)
    with pytest.raises(InvalidPath):  # a FIFO with no writer must not hang the server
        await asyncio.wait_for(backend.read_file(sid, "pipe", 10), 5)
    with pytest.raises(InvalidArgument):
        await backend.read_file(sid, "d", 10)
    with pytest.raises(InvalidArgument):
        await backend.write_files(sid, [FileSpec("d", b"x")])


# -- run_tests -----------------------------------------------------------------------

TEST_PROJECT = [
    FileSpec(
        "tests/test_demo.py",
        b"""import pytest

def test_ok():
    assert 1 + 1 == 2

def test_bad():
    assert 1 + 1 == 3, "math is broken"

@pytest.mark.skip(reason="not today")
def test_skipped():
    pass

@pytest.fixture
def broken():
    raise RuntimeError("fixture exploded")

def test_errored(broken):
    pass

class TestGroup:
    @pytest.mark.parametrize("n", [1, 2])
    def test_param(self, n):
        assert n
""",
    ),
]


async def test_run_tests_parses_pytest_results(backend: LocalBackend) -> None:
    sid = await new_session(backend, files=TEST_PROJECT)
    report = await backend.run_tests(sid, "", 60)
    outcomes = {case.name: case.outcome for case in report.tests}
    assert outcomes == {
        "tests.test_demo::test_ok": "passed",
        "tests.test_demo::test_bad": "failed",
        "tests.test_demo::test_skipped": "skipped",
        "tests.test_demo::test_errored": "errored",
        "tests.test_demo.TestGroup::test_param[1]": "passed",
        "tests.test_demo.TestGroup::test_param[2]": "passed",
    }
    assert (report.count("passed"), report.count("failed"), report.total) == (3, 1, 6)
    assert report.exit_code == 1 and not report.timed_out
    messages = {case.name: case.message for case in report.tests}
    assert "math is broken" in messages["tests.test_demo::test_bad"]
    assert "1 failed, 3 passed, 1 skipped, 1 error" in report.output
    # The report file is the backend's business, not left in the workspace.
    assert (await backend.exec(sid, spec("ls"))).stdout == b"tests\n"


async def test_run_tests_with_a_plain_command(backend: LocalBackend) -> None:
    sid = await new_session(backend)
    report = await backend.run_tests(sid, "echo checking; echo bad >&2; exit 2", 10)
    assert report.exit_code == 2 and report.tests == []
    assert report.output == "checking\nbad\n"


async def test_run_tests_does_not_follow_a_planted_report_link(
    backend: LocalBackend, tmp_path: Path
) -> None:
    # A host file the sandbox cannot read: the server must not read it on its behalf.
    host_file = tmp_path / "host.xml"
    host_file.write_text('<testsuite><testcase name="LEAKED"/></testsuite>')
    sid = await new_session(backend)
    report = await backend.run_tests(sid, f"ln -s {host_file} {{junitxml}}", 10)
    assert report.exit_code == 0 and report.tests == []


async def test_run_tests_timeout_and_output_tail(
    backend_factory: Callable[..., LocalBackend],
) -> None:
    async with backend_factory(test_output_bytes=400) as backend:
        sid = await new_session(backend)
        report = await backend.run_tests(sid, "seq 1 100000; echo SUMMARY; sleep 30", 1.5)
        assert report.timed_out and report.exit_code == -1
        assert report.output.startswith("1\n2\n3\n")
        assert "bytes omitted" in report.output
        assert report.output.endswith("100000\nSUMMARY\n")
        assert len(report.output) < 500


# -- sessions ------------------------------------------------------------------------


async def test_close_removes_the_workspace(backend: LocalBackend) -> None:
    info = await backend.create_session(SessionSpec(files=[FileSpec("f", b"x")]))
    await backend.exec(info.session_id, spec("mkdir ro && touch ro/f && chmod 500 ro"))
    assert await asyncio.to_thread(os.path.isdir, info.workdir)
    assert await backend.close_session(info.session_id)
    assert not await asyncio.to_thread(os.path.exists, os.path.dirname(info.workdir))
    assert not await backend.close_session(info.session_id)  # idempotent
    with pytest.raises(SessionNotFound):
        await backend.exec(info.session_id, spec("true"))
    with pytest.raises(SessionNotFound):
        await backend.read_file(info.session_id, "f", 1)


async def test_close_during_exec_ends_the_command(backend: LocalBackend) -> None:
    sid = await new_session(backend)
    nap = _unique_sleep()
    running = asyncio.create_task(backend.exec(sid, spec(f"sleep {nap}", timeout_s=60)))
    deadline = time.monotonic() + 30
    while not _pids_running(nap):  # the command has started
        assert time.monotonic() < deadline, "the command never started"
        await asyncio.sleep(0.05)
    assert await backend.close_session(sid)
    out = await asyncio.wait_for(running, 10)
    assert not out.timed_out and out.exit_code == 128 + 9
    assert await _gone(nap)


async def test_concurrent_commands_in_one_session(backend: LocalBackend) -> None:
    sid = await new_session(backend)
    outs = await asyncio.gather(
        *(backend.exec(sid, spec(f"sleep 0.3; echo {n}")) for n in range(8))
    )
    assert [out.stdout for out in outs] == [f"{n}\n".encode() for n in range(8)]


async def test_overlong_command_is_refused(backend: LocalBackend) -> None:
    sid = await new_session(backend)
    with pytest.raises(InvalidArgument):
        await backend.exec(sid, spec("true " + "x" * 200_000))


async def test_session_ids_are_unguessable_and_name_the_replica(backend: LocalBackend) -> None:
    first = await backend.create_session(SessionSpec())
    second = await backend.create_session(SessionSpec())
    replica, _, secret = first.session_id.partition(".")
    assert replica == first.replica == backend.replica_id
    assert len(secret) == 32 and first.session_id != second.session_id
    assert secret not in first.workdir  # commands see their path, not the id


async def test_a_session_of_another_replica_is_unavailable(backend: LocalBackend) -> None:
    foreign = "r0000beef." + "0" * 32
    with pytest.raises(SessionElsewhere, match="belongs to sandbox replica r0000beef"):
        await backend.exec(foreign, spec("true"))
    with pytest.raises(SessionNotFound):
        await backend.exec(f"{backend.replica_id}." + "0" * 32, spec("true"))


async def test_capacity_is_bounded(backend_factory: Callable[..., LocalBackend]) -> None:
    async with backend_factory(max_sessions=1) as backend:
        await new_session(backend)
        with pytest.raises(CapacityExceeded):
            await new_session(backend)


async def test_idle_sessions_are_reaped(backend_factory: Callable[..., LocalBackend]) -> None:
    before = (
        REGISTRY.get_sample_value("artfleet_sandbox_reaped_sessions_total", {"reason": "idle"}) or 0
    )
    async with backend_factory(idle_ttl_s=0.5, reap_interval_s=0.1) as backend:
        idle = await backend.create_session(SessionSpec())
        busy = await new_session(backend)
        kept = await new_session(backend, idle_ttl_s=600)
        # A command running longer than the TTL keeps its session alive.
        out = await backend.exec(busy, spec("sleep 1.5; echo alive"))
        assert out.stdout == b"alive\n"
        with pytest.raises(SessionNotFound):
            await backend.exec(idle.session_id, spec("true"))
        assert not await asyncio.to_thread(os.path.exists, idle.workdir)
        assert (await backend.exec(kept, spec("echo ok"))).stdout == b"ok\n"
    after = (
        REGISTRY.get_sample_value("artfleet_sandbox_reaped_sessions_total", {"reason": "idle"}) or 0
    )
    assert after - before >= 1


async def test_stop_closes_everything_it_owns(
    backend_factory: Callable[..., LocalBackend],
) -> None:
    other = backend_factory()
    async with other:
        theirs = await other.create_session(SessionSpec())
        backend = backend_factory()
        await backend.start()
        ours = await backend.create_session(SessionSpec())
        nap = _unique_sleep()
        await backend.exec(ours.session_id, spec(f"sleep {nap} &"))
        await backend.stop()
        assert not await asyncio.to_thread(os.path.exists, ours.workdir)
        assert await _gone(nap)
        # Another backend's sessions (another replica, say) are untouched.
        assert (await other.exec(theirs.session_id, spec("echo ok"))).stdout == b"ok\n"


# -- isolation -----------------------------------------------------------------------


async def test_isolation_is_reported_honestly(backend: LocalBackend, isolation_mode: str) -> None:
    info = await backend.create_session(SessionSpec())
    expected = ISOLATION_BWRAP if isolation_mode == "require" else ISOLATION_NONE
    base, _, tests = info.isolation.partition("; tests: ")
    assert base == expected and info.backend == "local"
    assert "pytest" in tests  # the Python that runs its tests is named too


@pytest.fixture
def broken_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `bwrap` that is installed but cannot work (no user namespaces, as in Docker)."""
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")


@pytest.mark.usefixtures("broken_bwrap")
async def test_broken_bubblewrap_is_detected(config_factory: Callable[..., LocalConfig]) -> None:
    async with LocalBackend(config_factory(use_bwrap="auto")) as backend:
        assert backend.isolation() == ISOLATION_NONE
    with pytest.raises(SandboxError, match="require"):
        await LocalBackend(config_factory(use_bwrap="require")).start()


async def test_bubblewrap_confines_commands(backend: LocalBackend, isolation_mode: str) -> None:
    if isolation_mode != "require":
        pytest.skip("only bubblewrap confines commands")
    first = await backend.create_session(SessionSpec())
    second = await backend.create_session(SessionSpec(files=[FileSpec("secret", b"s")]))
    sid = first.session_id
    assert (await backend.exec(sid, spec("touch /etc/x"))).exit_code != 0
    assert (await backend.exec(sid, spec(f"cat {second.workdir}/secret"))).exit_code != 0
    assert (await backend.exec(sid, spec("ls -A /root | grep -v .pyenv"))).stdout == b""
    # /proc/net shows the network namespace of the reader: only loopback unless asked.
    links = await backend.exec(sid, spec("tail -n +3 /proc/net/dev | cut -d: -f1"))
    assert links.stdout.split() == [b"lo"]
    assert (await backend.exec(sid, spec("touch ok && echo $$"))).stdout == b"2\n"  # own pids


async def test_the_start_probe_mounts_what_every_session_mounts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pod that masks /proc paths lets bubblewrap run `true` but not mount a fresh /proc:
    the probe must make the session's mounts, or the replica serves and every session fails."""
    from artfleet_sandbox.local_backend import bwrap as bwrap_module

    seen: list[list[str]] = []

    async def record(argv: list[str], **_: object) -> object:
        seen.append(list(argv))
        return SimpleNamespace(exit_code=0, stderr=b"")

    monkeypatch.setattr(bwrap_module, "run_process", record)
    wrapper = bwrap_module.Bubblewrap("/usr/bin/bwrap", (), (), [])
    assert await bwrap_module._works(wrapper, "/usr/bin")
    session = wrapper.argv(session_root="/s/1", others_root="/s", cwd="/s/1", network=False,
                           command=["true"])  # fmt: skip
    probe = seen[0]
    assert probe[1 : 1 + len(bwrap_module.ROOT_MOUNTS)] == list(bwrap_module.ROOT_MOUNTS)
    assert session[1 : 1 + len(bwrap_module.ROOT_MOUNTS)] == list(bwrap_module.ROOT_MOUNTS)
    assert "--proc" in probe and "--dev" in probe
