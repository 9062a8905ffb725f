"""Repos seeded from the replica's cache dir: one tarball per repo and commit, unpacked
into every workspace that names it; bad names are clear errors."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from waiting import wait_for_async

from artfleet_sandbox.backend import (
    ExecSpec,
    FileSpec,
    InvalidArgument,
    NotFound,
    RepoSpec,
    SessionSpec,
)
from artfleet_sandbox.local_backend import LocalBackend, LocalConfig


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


async def _read(backend: LocalBackend, session_id: str, path: str) -> bytes:
    return (await backend.read_file(session_id, path, 4096))[0]


@pytest.fixture
def cache(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "cache" / "acme" / "shop"
    (repo / "shop").mkdir(parents=True)
    (repo / "shop" / "cart.py").write_text("TAX = 0.2\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "first")
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "shop" / "cart.py").write_text("TAX = 0.3\n")  # uncommitted: not in `first`
    return tmp_path / "cache", first


async def test_sessions_are_seeded_from_one_tarball(
    config_factory: Callable[..., LocalConfig], cache: tuple[Path, str]
) -> None:
    cache_dir, first = cache
    config = config_factory(use_bwrap="never", cache_dir=str(cache_dir), test_runtime=False)
    async with LocalBackend(config) as backend:
        at_commit = RepoSpec("acme/shop", first, dest="repo")
        one = await backend.create_session(SessionSpec(repo=at_commit))
        assert await _read(backend, one.session_id, "repo/shop/cart.py") == b"TAX = 0.2\n"
        tarballs = list((cache_dir / ".artfleet-repos").iterdir())
        stamp = tarballs[0].stat().st_mtime_ns
        two = await backend.create_session(SessionSpec(repo=at_commit))
        assert await _read(backend, two.session_id, "repo/shop/cart.py") == b"TAX = 0.2\n"
        assert list((cache_dir / ".artfleet-repos").iterdir()) == tarballs  # built once
        assert tarballs[0].stat().st_mtime_ns == stamp
        tree = await backend.create_session(SessionSpec(repo=RepoSpec("acme/shop")))
        assert await _read(backend, tree.session_id, "shop/cart.py") == b"TAX = 0.3\n"
        with pytest.raises(NotFound):
            await _read(backend, tree.session_id, ".git/HEAD")


@pytest.mark.parametrize(
    ("spec", "error", "match"),
    [
        (RepoSpec("../outside"), InvalidArgument, "inside the cache dir"),
        (RepoSpec("acme/nothing"), NotFound, "not in the cache dir"),
        (RepoSpec("acme/shop", "--upload-pack=x"), InvalidArgument, "invalid commit"),
        (RepoSpec("acme/shop", "0" * 40), InvalidArgument, "cannot archive"),
        (RepoSpec("acme/shop", dest="../up"), InvalidArgument, "relative path"),
    ],
)
async def test_bad_repo_names_are_clear_errors(
    config_factory: Callable[..., LocalConfig],
    cache: tuple[Path, str],
    spec: RepoSpec,
    error: type[Exception],
    match: str,
) -> None:
    config = config_factory(use_bwrap="never", cache_dir=str(cache[0]), test_runtime=False)
    async with LocalBackend(config) as backend:
        with pytest.raises(error, match=match):
            await backend.create_session(SessionSpec(repo=spec))
        assert len(backend._sessions) == 0


async def test_later_sessions_take_dirs_unpacked_ahead(
    config_factory: Callable[..., LocalConfig], cache: tuple[Path, str]
) -> None:
    """After a repo's first session, dirs holding it are prepared in the background; later
    sessions take them (each its own: edits never leak), with their own files added."""
    cache_dir, first = cache
    config = config_factory(
        use_bwrap="never", cache_dir=str(cache_dir), test_runtime=False, repo_pool_size=2
    )
    async with LocalBackend(config) as backend:
        spec = RepoSpec("acme/shop", first)
        one = await backend.create_session(SessionSpec(repo=spec))
        tarball = await backend.repos.tarball(spec)
        await wait_for_async("two unpacked dirs", lambda: backend.repo_pool_ready(tarball) == 2)
        waiting = set(backend._seeded._ready[tarball])
        extra = FileSpec("notes.txt", b"mine\n")
        sessions = [
            await backend.create_session(SessionSpec(repo=spec, files=[extra])) for _ in range(2)
        ]
        # taken, not made on the session's path (the refill behind them makes new ones)
        assert {os.path.dirname(s.workdir) for s in sessions} == waiting
        edit = ExecSpec("echo 'TAX = 9' > shop/cart.py", 10, 1024)
        assert (await backend.exec(sessions[0].session_id, edit)).exit_code == 0
        assert await _read(backend, sessions[0].session_id, "shop/cart.py") == b"TAX = 9\n"
        for info in (one, sessions[1]):
            assert await _read(backend, info.session_id, "shop/cart.py") == b"TAX = 0.2\n"
        assert await _read(backend, sessions[1].session_id, "notes.txt") == b"mine\n"
        assert len({s.workdir for s in (one, *sessions)}) == 3
