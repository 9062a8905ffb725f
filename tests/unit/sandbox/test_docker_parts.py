"""Pure parts of the docker backend and the sticky-session router (no engine needed)."""

from __future__ import annotations

import io
import struct
import tarfile
import time

import pytest

from artfleet.clients.replicas import resolve_replicas, split_target
from artfleet.clients.sandbox import SandboxRouter
from artfleet_sandbox.backend import FileSpec, Forbidden, InvalidArgument, InvalidPath, Resources
from artfleet_sandbox.docker_backend import config as c
from artfleet_sandbox.docker_backend.archive import files_tar, first_file
from artfleet_sandbox.docker_backend.engine import ManagedContainer, parse_oom_kills
from artfleet_sandbox.docker_backend.execio import FrameDemux
from artfleet_sandbox.docker_backend.reaper import owner_containers, reap_reason
from artfleet_sandbox.docker_backend.spec import (
    ContainerRequest,
    check_network,
    container_options,
    effective_resources,
)
from artfleet_sandbox.replica import (
    ReplicaIdentity,
    new_replica_id,
    new_session_id,
    own_container_id,
    process_start_ticks,
    replica_of,
)


def frame(stream: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxI", stream, len(payload)) + payload


def test_frame_demux_handles_any_split() -> None:
    data = frame(1, b"hello ") + frame(2, b"oops") + frame(1, b"world") + frame(1, b"")
    for cut in range(1, len(data)):
        demux = FrameDemux()
        pieces = list(demux.feed(data[:cut])) + list(demux.feed(data[cut:]))
        out = b"".join(p for s, p in pieces if s == 1)
        err = b"".join(p for s, p in pieces if s == 2)
        assert (out, err) == (b"hello world", b"oops"), cut


def test_files_tar_owns_parents_and_refuses_escapes() -> None:
    data = files_tar([FileSpec("a/b/c.txt", b"hi", 0o4755), FileSpec("top.txt", b"x")], 1000, 1000)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert set(members) == {"a", "a/b", "a/b/c.txt", "top.txt"}
    assert all(m.uid == 1000 and m.gid == 1000 for m in members.values())
    assert members["a"].isdir() and members["a/b/c.txt"].mode == 0o755  # setuid dropped
    assert members["top.txt"].mode == 0o644
    for bad in ("/etc/passwd", "../x", "a/../../x", ""):
        with pytest.raises(InvalidPath):
            files_tar([FileSpec(bad, b"")], 1000, 1000)
    with pytest.raises(InvalidArgument):
        files_tar([FileSpec("x", b"", 0o170000)], 1000, 1000)


def _tar_of(*members: tuple[str, bytes | None]) -> list[bytes]:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, content in members:
            info = tarfile.TarInfo(name)
            if content is None:
                info.type = tarfile.SYMTYPE
                info.linkname = "/etc/shadow"
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    raw = buffer.getvalue()
    return [raw[i : i + 100] for i in range(0, len(raw), 100)]  # arrives in chunks


def test_first_file_caps_and_refuses_links() -> None:
    assert first_file(_tar_of(("f", b"0123456789")), "f", 4) == (b"0123", True)
    assert first_file(_tar_of(("f", b"0123")), "f", 4) == (b"0123", False)
    with pytest.raises(InvalidPath, match="not a regular file"):
        first_file(_tar_of(("l", None)), "l", 10)


def test_effective_resources_defaults_caps_and_negatives() -> None:
    defaults = Resources(1 << 30, 1.0, 256, 1 << 28)
    caps = Resources(2 << 30, 2.0, 512, 1 << 29)
    assert effective_resources(Resources(), defaults, caps) == defaults
    asked = Resources(memory_bytes=8 << 30, cpus=0.5, pids=1000, tmp_bytes=1)
    assert effective_resources(asked, defaults, caps) == Resources(2 << 30, 0.5, 512, 1)
    with pytest.raises(InvalidArgument, match=r"resources\.pids"):
        effective_resources(Resources(pids=-1), defaults, caps)


def test_container_options_contain_hostile_code() -> None:
    cfg = c.DockerConfig(deployment="dep")
    who = ReplicaIdentity("rdeadbeef", "", "host-a", 42, "1234")
    req = ContainerRequest("rdeadbeef.x", "img", cfg.defaults, network=False, job_id="job-1")
    options = container_options(req, cfg, who)
    assert options["network_mode"] == "none" and options["read_only"] is True
    assert options["cap_drop"] == ["ALL"] and options["security_opt"] == ["no-new-privileges"]
    assert options["mem_limit"] == options["memswap_limit"] == 1 << 30
    assert options["pids_limit"] == 256 and options["nano_cpus"] == 1_000_000_000
    assert options["user"] == cfg.init_user != cfg.user  # init survives `kill -9 -1`
    assert "size=268435456" in options["tmpfs"]["/tmp"]
    labels = options["labels"]
    assert labels[c.LABEL_DEPLOYMENT] == "dep" and labels[c.LABEL_REPLICA] == "rdeadbeef"
    assert labels[c.LABEL_SESSION] == "rdeadbeef.x" and labels[c.LABEL_JOB] == "job-1"
    assert labels[c.LABEL_REPLICA_PID] == "42" and int(labels[c.LABEL_CREATED_AT]) > 0
    net = container_options(ContainerRequest("s", "img", cfg.defaults, network=True), cfg, who)[
        "network_mode"
    ]
    assert net == cfg.network
    with pytest.raises(Forbidden):
        check_network(True, c.DockerConfig(allow_network=False))


def _item(**labels: str) -> ManagedContainer:
    return ManagedContainer("cid", labels, "running")


def test_reap_reason_by_owner() -> None:
    me = ReplicaIdentity.current("rme000000", container_id="")
    dead_pid = ReplicaIdentity("rold00000", "", me.host, 999_999_999, "1")
    mine = {c.LABEL_REPLICA: me.replica_id}
    assert reap_reason(_item(**mine, **{c.LABEL_SESSION: "s1"}), me, {"s1"}, {}) is None
    old = {c.LABEL_CREATED_AT: str(int(time.time() - 3600))}
    young = {c.LABEL_CREATED_AT: str(int(time.time()))}
    assert reap_reason(_item(**mine, **old, **{c.LABEL_SESSION: "s2"}), me, {"s1"}, {}) == "stale"
    assert reap_reason(_item(**mine, **young, **{c.LABEL_SESSION: "s2"}), me, {"s1"}, {}) is None
    local_dead = {
        c.LABEL_REPLICA: dead_pid.replica_id,
        c.LABEL_REPLICA_HOST: me.host,
        c.LABEL_REPLICA_PID: str(dead_pid.pid),
        c.LABEL_REPLICA_START: dead_pid.start_ticks,
    }
    assert reap_reason(_item(**local_dead), me, set(), {}) == "orphan"
    local_alive = local_dead | {
        c.LABEL_REPLICA_PID: str(me.pid),
        c.LABEL_REPLICA_START: me.start_ticks,
    }
    assert reap_reason(_item(**local_alive), me, set(), {}) is None
    elsewhere = {c.LABEL_REPLICA: "rother000", c.LABEL_REPLICA_HOST: "another-host"}
    assert reap_reason(_item(**elsewhere), me, set(), {}) is None  # cannot check: keep

    in_docker = ReplicaIdentity("rme000000", "a" * 64, "h", 1, "1")
    owned = {c.LABEL_REPLICA: "rother000", c.LABEL_REPLICA_CONTAINER: "b" * 64}
    items = [_item(**owned)]
    assert owner_containers(items, in_docker) == {"b" * 64}
    assert reap_reason(items[0], in_docker, set(), {"b" * 64: True}) is None
    assert reap_reason(items[0], in_docker, set(), {"b" * 64: False}) == "orphan"
    assert reap_reason(items[0], in_docker, set(), {}) is None  # unknown owner: keep
    previous_me = {c.LABEL_REPLICA: "rprev0000", c.LABEL_REPLICA_CONTAINER: "a" * 64}
    assert reap_reason(_item(**previous_me), in_docker, set(), {}) == "orphan"


def test_replica_ids_and_identity(tmp_path: object) -> None:
    replica = new_replica_id()
    session = new_session_id(replica)
    assert replica_of(session) == replica and replica_of("nonsense") is None
    assert replica_of(replica + ".short") is None
    assert process_start_ticks(999_999_999) == ""
    assert process_start_ticks(1) != ""
    assert own_container_id("/nonexistent/mountinfo") == ""


def test_parse_oom_kills_reads_v1_and_v2() -> None:
    assert parse_oom_kills("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n") == 2
    assert parse_oom_kills("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n") == 5
    assert parse_oom_kills("") == 0


def test_split_target_and_resolution() -> None:
    assert split_target("sandbox:50053") == [("sandbox", 50053)]
    assert split_target("a:1, [::1]:2") == [("a", 1), ("::1", 2)]
    for bad in ("", "nohost", "host:port", ":5"):
        with pytest.raises(ValueError):
            split_target(bad)


async def test_resolve_replicas_expands_names() -> None:
    assert await resolve_replicas("127.0.0.2:7,127.0.0.1:7") == ["127.0.0.1:7", "127.0.0.2:7"]
    assert "127.0.0.1:9" in await resolve_replicas("localhost:9")
    assert await resolve_replicas("no-such-host.invalid:1") == []


def test_router_orders_by_load_then_rotation() -> None:
    router = SandboxRouter("a:1", "token")
    addresses = ["a:1", "b:1", "c:1"]
    firsts = {router.order(addresses)[0] for _ in range(3)}
    assert firsts == set(addresses)  # rotation spreads ties
    router._pinned = {"a:1": 2, "b:1": 0, "c:1": 1}
    assert router.order(addresses) == ["b:1", "c:1", "a:1"]
