"""The docker backend seeds a workspace from the replica's repo cache in one put_archive,
owned by the session user (the agent can edit the repo)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from prometheus_client import REGISTRY
from sandbox_docker_kit import BackendFactory
from waiting import wait_for_async

from artfleet_sandbox.backend import ExecSpec, RepoSpec, SessionSpec


async def test_repo_from_the_cache_dir(docker_backend: BackendFactory, tmp_path: Path) -> None:
    repo = tmp_path / "acme" / "shop" / "shop"
    repo.mkdir(parents=True)
    (repo / "cart.py").write_text("TAX = 0.2\n")
    async with docker_backend(cache_dir=str(tmp_path)) as backend:
        spec = SessionSpec(repo=RepoSpec("acme/shop", dest="src"))
        for _ in range(2):  # the second session reuses the tarball
            info = await backend.create_session(spec)
            data, _ = await backend.read_file(info.session_id, "src/shop/cart.py", 1024)
            assert data == b"TAX = 0.2\n"
            edit = await backend.exec(
                info.session_id,
                ExecSpec(
                    "echo 'RATE = 1' >> src/shop/cart.py && tail -1 src/shop/cart.py", 30, 4096
                ),
            )
            assert edit.exit_code == 0 and edit.stdout == b"RATE = 1\n", edit.stderr
            await backend.close_session(info.session_id)
        assert len(list((tmp_path / ".artfleet-repos").iterdir())) == 1


def _git_repo(root: Path) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env |= {"GIT_COMMITTER_EMAIL": "t@t", "PATH": os.environ["PATH"]}
    root.mkdir(parents=True)
    (root / "inventory.py").write_text("LIMIT = 3\n")
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "one"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, env=env)
    return subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()


async def test_a_warm_container_already_holds_the_repo(
    docker_backend: BackendFactory, tmp_path: Path
) -> None:
    """After the first session of a repo, the pool keeps containers seeded with it: the next
    session is taken from there (no unpacking on its path), and the session user owns the
    files even though `git archive` wrote them as root's."""
    commit = _git_repo(tmp_path / "acme" / "stock")
    async with docker_backend(cache_dir=str(tmp_path), pool_size=1) as backend:
        spec = SessionSpec(repo=RepoSpec("acme/stock", commit))
        first = await backend.create_session(spec)
        await backend.close_session(first.session_id)
        tarball = await backend.repos.tarball(spec.repo)  # type: ignore[arg-type]
        # the pool seeds its container in the background
        await wait_for_async("a seeded container", lambda: backend.pool_ready("", tarball))
        assert backend.pool_ready("", tarball) == 1
        key = backend.repo_pool_key(backend.config.default_image, tarball)
        hits = REGISTRY.get_sample_value("artfleet_sandbox_pool_hits_total", {"image": key})
        info = await backend.create_session(spec)
        after = REGISTRY.get_sample_value("artfleet_sandbox_pool_hits_total", {"image": key})
        assert (after or 0) - (hits or 0) == 1
        edit = await backend.exec(
            info.session_id,
            ExecSpec("sed -i 's/3/4/' inventory.py && cat inventory.py && stat -c %u .", 30, 4096),
        )
        assert edit.exit_code == 0 and edit.stdout == b"LIMIT = 4\n1000\n", edit.stderr
        await backend.close_session(info.session_id)
