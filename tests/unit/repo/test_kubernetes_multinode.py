"""deploy/kubernetes/overlays/gpu-multinode: the trainer as one torch.distributed group over
two GPU nodes. The rendered manifests carry the launch contract (world, nodes, the node
rank from the pod index, node 0's address and port), pod 0 alone is the trainer service,
the ranks reach each other, the shared volume works across nodes, and the one probe of
both roles checks rank 0's gRPC health and passes a follower (run here against a real gRPC
health server). Rendered by tests/unit/repo/conftest.py (skips without kubectl)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from kube_manifests import Manifests, containers, named, policies_of, selects, workload_named

OVERLAY = "gpu-multinode"


@pytest.fixture(scope="module")
def manifests(rendered: dict[str, Manifests]) -> Manifests:
    return rendered[OVERLAY]


def _trainer(manifests: Manifests) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the StatefulSet's spec, its container's env by name)."""
    spec = named(manifests, "StatefulSet", "trainer")["spec"]
    env = {e["name"]: e for e in containers(named(manifests, "StatefulSet", "trainer"))[0]["env"]}
    return spec, env


def _pod_labels(spec: dict[str, Any], index: int) -> dict[str, str]:
    """The labels the StatefulSet controller gives pod `index` on top of the template's."""
    return {
        **spec["template"]["metadata"]["labels"],
        "statefulset.kubernetes.io/pod-name": f"trainer-{index}",
        "apps.kubernetes.io/pod-index": str(index),
    }


def test_the_trainer_is_a_statefulset_of_one_pod_per_node(manifests: Manifests) -> None:
    assert not [
        m for m in manifests if m["kind"] == "Deployment" and m["metadata"]["name"] == "trainer"
    ]
    spec, env = _trainer(manifests)
    assert (
        spec["podManagementPolicy"] == "Parallel" and spec["updateStrategy"]["type"] == "OnDelete"
    )
    world, nodes = (
        int(env["ARTFLEET_TRAIN_WORLD"]["value"]),
        int(env["ARTFLEET_TRAIN_NODES"]["value"]),
    )
    assert (world, nodes) == (16, 2) and nodes == spec["replicas"]
    gpus = containers({"spec": spec})[0]["resources"]["limits"]["nvidia.com/gpu"]
    assert world % nodes == 0 and world // nodes == int(gpus) == 8  # one rank per GPU
    rank = env["ARTFLEET_TRAIN_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert rank == "metadata.labels['apps.kubernetes.io/pod-index']"
    # One pod per node: required anti-affinity against its own pods, per host.
    terms = spec["template"]["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert any(
        t["topologyKey"] == "kubernetes.io/hostname"
        and selects(t["labelSelector"], _pod_labels(spec, 1))
        for t in terms
    )
    # Each rank uses the node's shared memory (NCCL): at least compose's 16gb.
    shm = next(v for v in spec["template"]["spec"]["volumes"] if v["name"] == "shm")
    assert shm["emptyDir"]["medium"] == "Memory" and int(shm["emptyDir"]["sizeLimit"][:-2]) >= 16


def test_node_0s_address_is_pod_0_by_a_headless_service_published_before_ready(
    manifests: Manifests,
) -> None:
    spec, env = _trainer(manifests)
    host, service = env["ARTFLEET_TRAIN_MASTER_ADDR"]["value"].split(".")
    assert host == "trainer-0" and service == spec["serviceName"]  # the pod's own DNS name
    ranks = named(manifests, "Service", service)["spec"]
    assert ranks["clusterIP"] == "None" and ranks["publishNotReadyAddresses"] is True
    assert all(selects({"matchLabels": ranks["selector"]}, _pod_labels(spec, i)) for i in (0, 1))
    port = int(env["ARTFLEET_TRAIN_MASTER_PORT"]["value"])
    assert port == 29500 and [p["port"] for p in ranks["ports"]] == [port]
    container_ports = {
        p["name"]: p["containerPort"] for p in containers({"spec": spec})[0]["ports"]
    }
    assert container_ports[ranks["ports"][0]["targetPort"]] == port


def test_the_trainer_service_reaches_pod_0_alone(manifests: Manifests) -> None:
    spec, _ = _trainer(manifests)
    selector = {"matchLabels": named(manifests, "Service", "trainer")["spec"]["selector"]}
    assert [i for i in (0, 1) if selects(selector, _pod_labels(spec, i))] == [0]


def _open_to_trainers(rules: list[dict[str, Any]], peers_key: str, trainer: dict[str, str]) -> bool:
    """Some rule admits trainer pods on every TCP port (NCCL's ephemeral ones)."""
    return any(
        any("podSelector" in p and selects(p["podSelector"], trainer) for p in r.get(peers_key, []))
        and all(p.get("protocol") == "TCP" and "port" not in p for p in r.get("ports", []))
        for r in rules
    )


def test_trainer_pods_reach_each_other_on_every_tcp_port(
    manifests: Manifests, rendered: dict[str, Manifests]
) -> None:
    gpu = rendered["gpu"]
    spec, _ = _trainer(manifests)
    pod0, pod1 = _pod_labels(spec, 0), _pod_labels(spec, 1)
    policies = policies_of(manifests, pod0)
    assert policies == policies_of(manifests, pod1)
    ingress = [r for p in policies for r in p["spec"].get("ingress") or []]
    egress = [r for p in policies for r in p["spec"].get("egress") or []]
    assert _open_to_trainers(ingress, "from", pod1) and _open_to_trainers(egress, "to", pod0)
    # ... and only each other: every other policy is the gpu overlay's, unchanged.
    others = [p for p in manifests if p["kind"] == "NetworkPolicy"]
    assert [p for p in others if p["metadata"]["name"] != "trainer-ranks"] == [
        p for p in gpu if p["kind"] == "NetworkPolicy"
    ]


def test_the_volume_is_shared_across_nodes_and_nothing_is_pinned_to_the_trainers_node(
    manifests: Manifests,
) -> None:
    claim = named(manifests, "PersistentVolumeClaim", "trainer-data")["spec"]
    assert claim["accessModes"] == ["ReadWriteMany"]
    for name in ("trainer", "inference", "api"):
        pod = workload_named(manifests, name)["spec"]["template"]["spec"]
        claims = [
            v["persistentVolumeClaim"]["claimName"]
            for v in pod["volumes"]
            if "persistentVolumeClaim" in v
        ]
        assert claims == ["trainer-data"], name
        assert "podAffinity" not in pod.get("affinity", {}), f"{name} is pinned to a trainer node"
    # vLLM has its GPU to itself here (the trainer's nodes have none left): a fixed share.
    env = {
        e["name"]: e.get("value")
        for e in containers(workload_named(manifests, "inference"))[0]["env"]
    }
    assert float(env["ARTFLEET_INFERENCE_GPU_MEMORY_UTILIZATION"]) == 0.9


def test_neither_trainer_pod_is_evicted_while_the_group_runs(manifests: Manifests) -> None:
    spec, _ = _trainer(manifests)
    budgets = [b["spec"] for b in manifests if b["kind"] == "PodDisruptionBudget"]
    for index in (0, 1):
        mine = [b for b in budgets if selects(b["selector"], _pod_labels(spec, index))]
        assert len(mine) == 1 and mine[0]["maxUnavailable"] == 0, index
        assert mine[0]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


@pytest.fixture
def health_server() -> Iterator[tuple[int, health.HealthServicer]]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port, servicer
    finally:
        server.stop(grace=None)


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_one_probe_checks_rank_0s_grpc_health_and_passes_a_follower(
    manifests: Manifests, health_server: tuple[int, health.HealthServicer]
) -> None:
    container = containers(named(manifests, "StatefulSet", "trainer"))[0]
    commands = {tuple(container[k]["exec"]["command"]) for k in container if k.endswith("Probe")}
    assert len(commands) == 1, "startup, readiness and liveness run the same check"
    (command,) = commands
    # The image's `python`: this interpreter, first on PATH.
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]

    def probe(rank: str | None, port: int) -> int:
        env = {**os.environ, "PATH": path, "ARTFLEET_PORT": str(port)}
        env.pop("ARTFLEET_TRAIN_NODE_RANK", None)
        if rank is not None:
            env["ARTFLEET_TRAIN_NODE_RANK"] = rank
        return subprocess.run(command, env=env, capture_output=True, timeout=60).returncode

    port, servicer = health_server
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    assert probe("0", port) == 0
    assert probe(None, port) == 0  # the settings' default rank is node 0
    servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    assert probe("0", port) == 1  # rank 0 loading the model (or hung): not ready
    closed = _closed_port()
    assert probe("0", closed) == 1
    assert probe("1", closed) == 0  # a follower has no gRPC port: alive is healthy
