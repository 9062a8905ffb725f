"""Rendering deploy/kubernetes and reading what it renders: the helpers of
tests/unit/repo/test_kubernetes_*.py (their fixtures: tests/unit/repo/conftest.py)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from repo_paths import ROOT

KUBE = ROOT / "deploy" / "kubernetes"
OVERLAYS = sorted(p.name for p in (KUBE / "overlays").iterdir() if p.is_dir())
# The oldest Kubernetes the manifests target: user-namespaced pods (hostUsers: false) and
# procMount: Unmasked, which the sandbox pods need, are on by default from 1.33.
KUBERNETES_VERSION = "1.33.0"
WORKLOADS = ("Deployment", "StatefulSet")
# What the operator's secrets.env holds in these tests: values no manifest may contain.
SECRETS = {
    "ARTFLEET_API_TOKEN": "test-token-4Qm8v2Lr",
    "REDIS_PASSWORD": "test-redis-9Xk3pW7s",
    "OPENAI_API_KEY": "",
    "WANDB_API_KEY": "",
}
Manifests = list[dict[str, Any]]


def kustomize_command() -> list[str] | None:
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    return None


def render(kustomize: list[str], directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*kustomize, str(directory)], capture_output=True, text=True, timeout=60, check=False
    )


def workloads(manifests: Manifests) -> Iterator[dict[str, Any]]:
    return (m for m in manifests if m["kind"] in WORKLOADS)


def workload_named(manifests: Manifests, name: str) -> dict[str, Any]:
    """The Deployment or StatefulSet of that name (gpu-multinode's trainer is the latter)."""
    found = [m for m in workloads(manifests) if m["metadata"]["name"] == name]
    assert len(found) == 1, f"workload {name}: {len(found)} found"
    return found[0]


def named(manifests: Manifests, kind: str, name: str) -> dict[str, Any]:
    found = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def pod_labels(manifests: Manifests) -> dict[str, dict[str, str]]:
    """Workload name -> the labels of its pods."""
    return {
        w["metadata"]["name"]: w["spec"]["template"]["metadata"]["labels"]
        for w in workloads(manifests)
    }


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector (matchLabels, matchExpressions with In/NotIn/Exists) on labels."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        ok = {
            "In": labels.get(key) in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def policies_of(manifests: Manifests, labels: dict[str, str]) -> list[dict[str, Any]]:
    return [
        p
        for p in manifests
        if p["kind"] == "NetworkPolicy" and selects(p["spec"]["podSelector"], labels)
    ]


def containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    return list(workload["spec"]["template"]["spec"]["containers"])


def env_names(manifests: Manifests, container: dict[str, Any]) -> set[str]:
    names = {e["name"] for e in container.get("env", [])}
    for source in container.get("envFrom", []):
        ref = source["configMapRef"]["name"]
        config = named(manifests, "ConfigMap", ref)
        names |= set(config["data"])
    return names


class _ComposeLoader(yaml.SafeLoader):
    """Compose's `!reset` / `!override` tags, read as the value they carry."""


def _plain(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)  # type: ignore[arg-type]


_ComposeLoader.add_constructor("!reset", _plain)
_ComposeLoader.add_constructor("!override", _plain)


def compose_services(overlay: str) -> dict[str, dict[str, Any]]:
    """The compose stack this overlay mirrors: the GPU file, or it plus the CPU override."""
    base = yaml.load((ROOT / "docker-compose.yml").read_text(), Loader=_ComposeLoader)
    services: dict[str, dict[str, Any]] = base["services"]
    if overlay == "cpu":
        cpu = yaml.load((ROOT / "docker-compose.cpu.yml").read_text(), Loader=_ComposeLoader)
        for name, override in cpu["services"].items():
            services[name] = {**services[name], "image": override["image"]}
            services[name]["environment"] = {
                **services[name]["environment"],
                **override.get("environment", {}),
            }
    return services
