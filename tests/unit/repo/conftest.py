"""The rendered Kubernetes overlays, shared by test_kubernetes_*.py: kubectl kustomize (or
kustomize) on a copy of deploy/kubernetes with an operator's secrets.env, and the strict
schema check. Without kubectl (or kubernetes-validate) they skip, and fail under CI=true."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_manifests import (
    KUBE,
    KUBERNETES_VERSION,
    OVERLAYS,
    SECRETS,
    Manifests,
    kustomize_command,
    render,
)


@pytest.fixture(scope="module")
def kustomize(require_infra: Callable[[bool, str], None]) -> list[str]:
    command = kustomize_command()
    require_infra(command is not None, "kubectl (or kustomize) is not installed")
    assert command is not None
    return command


@pytest.fixture(scope="module")
def tree(module_tmp: Callable[[str], Path]) -> Path:
    """A copy of deploy/kubernetes with an operator's secrets.env in it."""
    copy = module_tmp("kube") / "kubernetes"
    shutil.copytree(KUBE, copy)
    lines = [f"{name}={value}" for name, value in SECRETS.items()]
    (copy / "base" / "secrets.env").write_text("\n".join(lines) + "\n")
    return copy


@pytest.fixture(scope="module")
def rendered(kustomize: list[str], tree: Path) -> dict[str, Manifests]:
    out = {}
    for overlay in OVERLAYS:
        result = render(kustomize, tree / "overlays" / overlay)
        assert result.returncode == 0, f"{overlay}: {result.stderr}"
        out[overlay] = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    return out


@pytest.fixture(scope="module")
def validate(require_infra: Callable[[bool, str], None]) -> Callable[[dict[str, Any]], None]:
    found = importlib.util.find_spec("kubernetes_validate") is not None
    require_infra(found, "kubernetes-validate is not installed (pip install -e .[dev])")
    import kubernetes_validate

    def check(manifest: dict[str, Any]) -> None:
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)

    return check
