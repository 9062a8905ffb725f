"""Time to a ready session for a 50 MB repository: seeded from the replica's cache dir
(first use builds the tarball, warm uses only unpack it) against the baseline measured in
the same run, the same files sent with CreateSession one by one.

    python bench/repo_bench.py [--backend local|docker] [--mb 50] [--warm 3]

Prints `repo_session_upload_s=`, `repo_session_first_s=`, `repo_session_warm_s=` (median
of --warm sessions; target <= 1 s) and `repo_warm_speedup=` (upload / warm). A warm
session takes a container (local: a session dir) the replica seeded with the repo in the
background (the bench waits until one is there, as a replica serving a job has had time
to); `repo_session_unpooled_s=` is a warm session without that pool (docker: a plain
pooled container and one `put_archive` of the cached tar; local: `tar -x` of it).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from artfleet_sandbox.backend import FileSpec, RepoSpec, SandboxBackend, SessionSpec
from artfleet_sandbox.docker_backend import DockerBackend, DockerConfig
from artfleet_sandbox.local_backend import LocalBackend, LocalConfig

FILE_BYTES = 25_000


def make_repo(root: Path, megabytes: int) -> tuple[str, list[FileSpec]]:
    """A git repo of `megabytes` MB of source-like files; returns its commit and files."""
    repo = root / "bench" / "big"
    files: list[FileSpec] = []
    line = b"def function_%06d(value):\n    return value * %d  # some realistic code\n"
    for i in range(megabytes * 1_000_000 // FILE_BYTES):
        path = f"pkg{i // 100:03d}/module_{i:05d}.py"
        body = b"".join(line % (i * 1000 + j, j) for j in range(FILE_BYTES // len(line % (0, 0))))
        target = repo / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(body)
        files.append(FileSpec(path, body))
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b"}
    env |= {"GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "bench"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, env=env)
    commit = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    return commit, files


async def timed(backend: SandboxBackend, spec: SessionSpec, warm: bool = False) -> float:
    if warm and spec.repo is not None:
        await seeded_pool_ready(backend, spec.repo)
    started = time.perf_counter()
    info = await backend.create_session(spec)
    seconds = time.perf_counter() - started
    await backend.close_session(info.session_id)
    return seconds


async def seeded_pool_ready(backend: SandboxBackend, repo: RepoSpec) -> None:
    """Waits for a warm container (local: a session dir) that already holds the repo."""
    if isinstance(backend, DockerBackend) and backend.config.pool_repos:
        docker_tarball = await backend.repos.tarball(repo)
        await until(lambda: backend.pool_ready("", docker_tarball) > 0)
    elif isinstance(backend, LocalBackend) and backend.config.repo_pool_size > 0:
        local_tarball = await backend.repos.tarball(repo)
        await until(lambda: backend.repo_pool_ready(local_tarball) > 0)


async def until(ready: Callable[[], bool], limit_s: float = 300.0) -> None:
    """Polls `ready` (the pool fills on its own tasks) for up to `limit_s`."""
    for _ in range(int(limit_s / 0.2)):
        if ready():
            return
        await asyncio.sleep(0.2)


async def sessions(kind: str, tmp: str, commit: str, files: list[FileSpec], warm: int) -> None:
    backend: SandboxBackend
    if kind == "docker":
        backend = DockerBackend(DockerConfig(cache_dir=tmp, pool_size=2))
    else:
        backend = LocalBackend(LocalConfig(cache_dir=tmp, test_runtime=False))
    repo = SessionSpec(repo=RepoSpec("bench/big", commit))
    await backend.start()
    try:
        upload = await timed(backend, SessionSpec(files=files))
        first = await timed(backend, repo)  # builds the tar; no seeded container yet
        warm_s = statistics.median([await timed(backend, repo, True) for _ in range(warm)])
    finally:
        await backend.stop()
    print(f"repo_session_upload_s={upload:.3f}")
    print(f"repo_session_first_s={first:.3f}")
    print(f"repo_session_warm_s={warm_s:.3f}")
    print(f"repo_warm_speedup={upload / warm_s:.2f}")


def plain_ready(backend: DockerBackend) -> bool:
    return backend.pool_ready("") > 0


async def unpooled(kind: str, tmp: str, commit: str, warm: int) -> None:
    """Without repo-seeded pools: docker takes a plain warm container + one put_archive,
    local unpacks the tar into a new session dir."""
    backend: SandboxBackend
    if kind == "docker":
        backend = DockerBackend(DockerConfig(cache_dir=tmp, pool_size=2, pool_repos=False))
    else:
        backend = LocalBackend(LocalConfig(cache_dir=tmp, test_runtime=False, repo_pool_size=0))
    repo = SessionSpec(repo=RepoSpec("bench/big", commit))
    await backend.start()
    try:
        await timed(backend, SessionSpec())  # fills docker's plain pool
        times = []
        for _ in range(warm):
            if isinstance(backend, DockerBackend):
                await until(functools.partial(plain_ready, backend))
            times.append(await timed(backend, repo))
    finally:
        await backend.stop()
    print(f"repo_session_unpooled_s={statistics.median(times):.3f}")


async def run(kind: str, megabytes: int, warm: int) -> None:
    with tempfile.TemporaryDirectory(prefix="repo-bench-") as tmp:
        commit, files = make_repo(Path(tmp), megabytes)
        print(f"backend={kind} repo_mb={megabytes} files={len(files)}")
        await sessions(kind, tmp, commit, files, warm)
        await unpooled(kind, tmp, commit, warm)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("local", "docker"), default="local")
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--warm", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(run(args.backend, args.mb, args.warm))


if __name__ == "__main__":
    main()
