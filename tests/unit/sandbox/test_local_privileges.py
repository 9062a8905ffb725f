"""No unisolated surprises: without bubblewrap the local backend starts only when told to,
and with it commands never carry the server's privileges (real bwrap, real processes)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from artfleet_sandbox.backend import ExecMode, ExecSpec, FileSpec, SandboxError, SessionSpec
from artfleet_sandbox.local_backend import LocalBackend
from artfleet_sandbox.local_backend.bwrap import UNISOLATED_NOTICE
from artfleet_sandbox.local_backend.config import ISOLATION_NONE, LocalConfig

pytestmark = pytest.mark.timeout(120)

SECRET = b"root-only-secret-7f3a"


def spec(command: str, *, repl: bool = False) -> ExecSpec:
    mode: ExecMode = "repl" if repl else "stateless"
    return ExecSpec(command=command, timeout_s=20, max_output_bytes=4096, mode=mode)


async def test_without_bubblewrap_the_start_is_refused_with_the_ways_out(
    config_factory: Callable[..., LocalConfig],
) -> None:
    backend = LocalBackend(config_factory(use_bwrap="never", allow_unisolated=False))
    with pytest.raises(SandboxError) as info:
        await backend.start()
    message = str(info.value)
    assert "apt-get install bubblewrap" in message
    assert "ARTFLEET_SANDBOX_BACKEND=docker" in message
    assert "ARTFLEET_SANDBOX_ALLOW_UNISOLATED=1" in message


async def test_unisolated_is_an_explicit_choice_with_a_notice(
    config_factory: Callable[..., LocalConfig], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="artfleet_sandbox.local_backend.backend")
    async with LocalBackend(config_factory(use_bwrap="never", allow_unisolated=True)) as backend:
        info = await backend.create_session(SessionSpec())
        assert info.isolation.startswith(ISOLATION_NONE)
    assert UNISOLATED_NOTICE in caplog.messages


@pytest.fixture
def root_only_file() -> Iterator[Path]:
    """A 0600 file of the test's user, outside every path bubblewrap hides."""
    directory = Path(tempfile.mkdtemp(prefix="artfleet-priv-", dir="/var/tmp"))
    directory.chmod(0o755)
    secret = directory / "secret"
    secret.write_bytes(SECRET)
    secret.chmod(0o600)
    yield secret
    shutil.rmtree(directory)


@pytest.fixture
async def confined(config_factory: Callable[..., LocalConfig]) -> AsyncIterator[LocalBackend]:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap missing")
    backend = LocalBackend(config_factory(use_bwrap="require", allow_unisolated=False))
    try:
        await backend.start()
    except SandboxError as exc:  # installed, but user namespaces are not allowed here
        pytest.skip(str(exc))
    yield backend
    await backend.stop()


@pytest.mark.parametrize("repl", [False, True], ids=["stateless", "repl"])
async def test_bubblewrapped_commands_run_unprivileged(
    confined: LocalBackend, root_only_file: Path, repl: bool
) -> None:
    # As root the server drops to nobody; as anyone else it cannot gain or change users.
    expected_uid = 65534 if os.geteuid() == 0 else os.geteuid()
    info = await confined.create_session(SessionSpec(files=[FileSpec("given.txt", b"a\n")]))
    sid = info.session_id
    whoami = await confined.exec(sid, spec("id -u; id -G", repl=repl))
    uid, groups = whoami.stdout.decode().split("\n")[:2]
    assert int(uid) == expected_uid
    if os.geteuid() == 0:
        assert "0" not in groups.split()  # no root group either
    stolen = await confined.exec(sid, spec(f"cat {root_only_file}", repl=repl))
    assert stolen.exit_code != 0 and SECRET not in stolen.stdout
    assert b"Permission denied" in stolen.stderr or b"Permission denied" in stolen.stdout
    # The workspace stays the command's own: files the server wrote and new ones alike.
    edit = "echo b >> given.txt && mkdir -p d && echo c > d/new && cat given.txt d/new"
    edited = await confined.exec(sid, spec(edit, repl=repl))
    assert (edited.exit_code, edited.stdout) == (0, b"a\nb\nc\n")


async def test_files_written_later_belong_to_the_sandbox_user(confined: LocalBackend) -> None:
    info = await confined.create_session(SessionSpec())
    await confined.write_files(info.session_id, [FileSpec("deep/er/file.txt", b"x", 0o444)])
    owner = await confined.exec(info.session_id, spec("stat -c %u deep deep/er deep/er/file.txt"))
    expected = str(65534 if os.geteuid() == 0 else os.geteuid())
    assert owner.stdout.decode().split() == [expected] * 3
    chmod = await confined.exec(info.session_id, spec("chmod u+w deep/er/file.txt && echo ok"))
    assert chmod.stdout == b"ok\n"


def test_the_service_refuses_to_start_unisolated_with_a_message(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARTFLEET_")}
    env.update(
        ARTFLEET_API_TOKEN="privileges-test-token",
        ARTFLEET_SANDBOX_BACKEND="local",
        ARTFLEET_USE_BWRAP="never",
        ARTFLEET_WORKSPACE_ROOT=str(tmp_path),
        PYTHONPATH=os.pathsep.join(sys.path),
    )
    done = subprocess.run(
        [sys.executable, "-m", "artfleet_sandbox"], env=env, capture_output=True, timeout=60
    )
    stderr = done.stderr.decode()
    assert done.returncode == 2, stderr
    assert "apt-get install bubblewrap" in stderr and "Traceback" not in stderr
