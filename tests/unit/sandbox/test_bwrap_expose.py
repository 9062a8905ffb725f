"""Exposed paths under the fresh /tmp (the test runtime, a service venv there) stay
reachable by the unprivileged session user: their re-made parents are 0755, not 0700."""

from __future__ import annotations

from artfleet_sandbox.local_backend.bwrap import Bubblewrap


def _dirs_made_0755(argv: list[str]) -> list[str]:
    return [
        argv[i + 3] for i in range(len(argv) - 3) if argv[i : i + 3] == ["--perms", "0755", "--dir"]
    ]


def test_parents_of_an_exposed_path_under_tmp_are_made_0755() -> None:
    bwrap = Bubblewrap("bwrap", hide=(), expose=["/tmp/artfleet-cache-0/pyruntime-x"])
    argv = bwrap.argv(
        session_root="/srv/s/1",
        others_root="/srv/s",
        cwd="/srv/s/1",
        network=False,
        command=["true"],
    )
    assert _dirs_made_0755(argv) == ["/tmp/artfleet-cache-0"]
    # made after /tmp's tmpfs, before the path is bound back
    assert argv.index("/tmp/artfleet-cache-0") > argv.index("--tmpfs")
    assert argv.index("/tmp/artfleet-cache-0/pyruntime-x") > argv.index("/tmp/artfleet-cache-0")


def test_a_path_outside_the_emptied_dirs_needs_no_parents() -> None:
    bwrap = Bubblewrap("bwrap", hide=(), expose=["/opt/python"])
    argv = bwrap.argv(
        session_root="/srv/s/1",
        others_root="/srv/s",
        cwd="/srv/s/1",
        network=False,
        command=["true"],
    )
    assert _dirs_made_0755(argv) == []


def _argv(bwrap: Bubblewrap) -> list[str]:
    return bwrap.argv(
        session_root="/srv/s/1", others_root="/srv/s", cwd="/srv/s/1", network=False, command=[]
    )
