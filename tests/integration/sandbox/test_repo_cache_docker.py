"""The docker backend seeds a workspace from the replica's repo cache in one put_archive,
owned by the session user (the agent can edit the repo)."""

from __future__ import annotations

from pathlib import Path

from sandbox_docker_kit import BackendFactory

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
