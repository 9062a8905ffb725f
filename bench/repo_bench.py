"""Time to a ready session for a 50 MB repository: seeded from the replica's cache dir
(first use builds the tarball, warm uses only unpack it) against the baseline measured in
the same run, the same files sent with CreateSession one by one.

    python bench/repo_bench.py [--backend local|docker] [--mb 50] [--warm 3]

Prints `repo_session_upload_s=`, `repo_session_first_s=`, `repo_session_warm_s=` (median
of --warm sessions; target <= 1 s) and `repo_warm_speedup=` (upload / warm).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from artfleet_sandbox.backend import FileSpec, RepoSpec, SandboxBackend, SessionSpec
from artfleet_sandbox.docker_backend import DockerBackend, DockerConfig
from artfleet_sandbox.local import LocalBackend, LocalConfig

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


async def timed(backend: SandboxBackend, spec: SessionSpec) -> float:
    started = time.perf_counter()
    info = await backend.create_session(spec)
    seconds = time.perf_counter() - started
    await backend.close_session(info.session_id)
    return seconds


async def run(kind: str, megabytes: int, warm: int) -> None:
    with tempfile.TemporaryDirectory(prefix="repo-bench-") as tmp:
        commit, files = make_repo(Path(tmp), megabytes)
        backend: SandboxBackend
        if kind == "docker":
            backend = DockerBackend(DockerConfig(cache_dir=tmp, pool_size=2))
        else:
            backend = LocalBackend(LocalConfig(cache_dir=tmp, test_runtime=False))
        await backend.start()
        try:
            repo = SessionSpec(repo=RepoSpec("bench/big", commit))
            upload = await timed(backend, SessionSpec(files=files))
            first = await timed(backend, repo)
            warm_s = statistics.median([await timed(backend, repo) for _ in range(warm)])
        finally:
            await backend.stop()
    print(f"backend={kind} repo_mb={megabytes} files={len(files)}")
    print(f"repo_session_upload_s={upload:.3f}")
    print(f"repo_session_first_s={first:.3f}")
    print(f"repo_session_warm_s={warm_s:.3f}")
    print(f"repo_warm_speedup={upload / warm_s:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("local", "docker"), default="local")
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--warm", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(run(args.backend, args.mb, args.warm))


if __name__ == "__main__":
    main()
