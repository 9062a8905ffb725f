"""The trainer on two "nodes" (network namespaces on one bridge, tests/support/
netns_hosts.py), one rank each, launched as each node of a real cluster would be: the same
`python -m artfleet_trainer`, the node's index and node 0's address in its settings
(torchrun's static rendezvous over the bridge). Node 0's rank serves gRPC; a Tinker-
compatible client trains through it on both nodes' ranks; a SIGTERM to node 0 ends the
group on both nodes.

Redis runs on node 0. No inference service runs: these calls sample nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from netns_hosts import NetnsHosts, can_make_namespaces
from trainer_ranks import STOP_S, TOKEN, kill_launcher, train_a_client, wait_serving

from artfleet.runtime.rpc.client import sync_channel
from artfleet.v1 import tinker_api_pb2_grpc as pb_grpc
from artfleet_cli.fleet_binaries import redis_server_binary

pytestmark = pytest.mark.integration

HOSTS = ("node0", "node1")
GRPC_PORT, METRICS_PORT, MASTER_PORT, REDIS_PORT = 50051, 9100, 29500, 6379


@pytest.fixture
def hosts(require_infra: Callable[[bool, str], None]) -> Iterator[NetnsHosts]:
    why_not = can_make_namespaces()
    require_infra(not why_not, why_not)
    made = NetnsHosts(HOSTS)
    made.start()
    try:
        yield made
    finally:
        assert made.stop() == [], "namespaces or links left behind"


def _spawn(
    hosts: NetnsHosts, host: str, cmd: list[str], env: dict[str, str], log: Path
) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [*hosts.exec_prefix(host), *cmd],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def test_two_nodes_of_one_rank_train_a_tinker_client_and_stop_together(
    hosts: NetnsHosts, tmp_path: Path
) -> None:
    node0 = hosts.address("node0")
    started: list[subprocess.Popen[bytes]] = []
    try:
        redis_cmd = [redis_server_binary(), "--bind", node0, "--port", str(REDIS_PORT)]
        redis_cmd += ["--save", "", "--appendonly", "no"]
        started.append(_spawn(hosts, "node0", redis_cmd, dict(os.environ), tmp_path / "redis.log"))
        _wait_redis(f"redis://{node0}:{REDIS_PORT}/0")
        launchers = []
        for index, host in enumerate(HOSTS):
            env = {
                **os.environ,
                "ARTFLEET_API_TOKEN": TOKEN,
                "ARTFLEET_HOST": hosts.address(host),
                "ARTFLEET_PORT": str(GRPC_PORT),
                "ARTFLEET_METRICS_PORT": str(METRICS_PORT),
                "ARTFLEET_REDIS_URL": f"redis://{node0}:{REDIS_PORT}/0",
                "ARTFLEET_ART_PATH": str(tmp_path / host / "art"),
                "ARTFLEET_TRAJECTORY_LOG_DIR": str(tmp_path / host / "logs"),
                "ARTFLEET_BACKEND": "torch",
                "ARTFLEET_INFERENCE_ENGINE": "vllm",
                "ARTFLEET_INFERENCE_URL": f"http://{node0}:8000",  # nothing answers
                "ARTFLEET_TRAIN_WORLD": "2",
                "ARTFLEET_TRAIN_NODES": "2",
                "ARTFLEET_TRAIN_NODE_RANK": str(index),
                "ARTFLEET_TRAIN_MASTER_ADDR": node0,
                "ARTFLEET_TRAIN_MASTER_PORT": str(MASTER_PORT),
                "GLOO_SOCKET_IFNAME": "eth0",  # the host's link (its hostname is not its own)
            }
            log = tmp_path / f"{host}.log"
            launcher = _spawn(hosts, host, [sys.executable, "-m", "artfleet_trainer"], env, log)
            started.append(launcher)
            launchers.append((launcher, log))
        (first, first_log), (second, second_log) = launchers
        target = f"{node0}:{GRPC_PORT}"
        wait_serving(target, first, first_log)
        train_a_client(pb_grpc.TinkerApiStub(sync_channel(target, TOKEN)))

        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=STOP_S) == 0, first_log.read_text()[-4000:]
        assert second.wait(timeout=STOP_S) == 0, second_log.read_text()[-4000:]  # its rank left
        assert "rank 1: rank 0 stopped the group" in second_log.read_text()
    finally:
        for process in started:
            kill_launcher(process)


def _wait_redis(url: str) -> None:
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if client.ping():
                return
        except redis.ConnectionError:
            time.sleep(0.2)  # polling a starting server
    raise AssertionError("redis did not start")
