"""deploy/kubernetes: every overlay renders (`kubectl kustomize`), passes the Kubernetes
schemas (kubernetes-validate, strict, a pinned version), and keeps its promises: the
sandbox reaches nothing and only rollout workers reach it, no secret is committed, every
container has requests, limits and probes, and names, ports and images are compose's.

Without kubectl (or kubernetes-validate) these skip locally and fail under CI=true."""

from __future__ import annotations

import base64
import importlib
import shutil
import subprocess
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
    compose_services,
    containers,
    env_names,
    named,
    pod_labels,
    policies_of,
    render,
    selects,
    workload_named,
    workloads,
)
from repo_paths import ROOT

# The distributed trainer's launch settings (docs/deployment.md, "The trainer on 2 nodes"),
# which the trainer side adds to TrainerSettings: until it has any of them they are exempt
# from the check that the manifests' settings are read; from then on, every one must be.
TRAIN_LAUNCH = {
    "ARTFLEET_TRAIN_WORLD",
    "ARTFLEET_TRAIN_NODES",
    "ARTFLEET_TRAIN_NODE_RANK",
    "ARTFLEET_TRAIN_MASTER_ADDR",
    "ARTFLEET_TRAIN_MASTER_PORT",
}

# --- rendering and the schemas --------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_passes_the_kubernetes_schemas_strictly(
    overlay: str, rendered: dict[str, Manifests], validate: Callable[[dict[str, Any]], None]
) -> None:
    kinds = set()
    for manifest in rendered[overlay]:
        validate(manifest)
        kinds.add(manifest["kind"])
    print(f"{overlay}: {len(rendered[overlay])} objects valid for Kubernetes {KUBERNETES_VERSION}")
    expected = {"Deployment", "StatefulSet", "Service", "NetworkPolicy"}
    expected |= {"PodDisruptionBudget", "HorizontalPodAutoscaler", "Secret", "ConfigMap"}
    assert expected <= kinds


def test_strict_validation_refuses_a_field_kubernetes_does_not_have(
    rendered: dict[str, Manifests], validate: Callable[[dict[str, Any]], None]
) -> None:
    import kubernetes_validate

    deployment = next(workloads(rendered[OVERLAYS[0]]))
    containers(deployment)[0]["resource"] = {"limits": {"cpu": "1"}}  # a typo: resources
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment)


def test_the_components_render_onto_an_overlay(kustomize: list[str], tree: Path) -> None:
    overlay = tree / "overlays" / "with-components"
    overlay.mkdir()
    components = sorted(p.name for p in (tree / "components").iterdir())
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": ["../cpu"],
                "components": [f"../../components/{c}" for c in components],
            }
        )
    )
    result = render(kustomize, overlay)
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert "sandbox-observability" in {d["metadata"]["name"] for d in docs}
    # rollout-plugins: the rollout workers run the image with the plugin packages.
    images = {d["metadata"]["name"]: {c["image"] for c in containers(d)} for d in workloads(docs)}
    assert images["rollout"] == {"artfleet/rollout-plugins:latest"}
    assert "artfleet/rollout-plugins:latest" not in images["trainer"] | images["api"]


# --- secrets ----------------------------------------------------------------------------


def test_rendering_without_the_operators_secrets_file_fails(
    kustomize: list[str], tmp_path: Path
) -> None:
    copy = tmp_path / "kubernetes"
    shutil.copytree(KUBE, copy, ignore=shutil.ignore_patterns("secrets.env"))
    result = render(kustomize, copy / "overlays" / OVERLAYS[0])
    assert result.returncode != 0
    assert "secrets.env" in result.stderr


def test_no_secret_is_committed_and_the_rendered_one_is_the_operators(
    rendered: dict[str, Manifests],
) -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "deploy/kubernetes"], cwd=ROOT, capture_output=True, text=True
    )
    files = tracked.stdout.split() if tracked.returncode == 0 else []
    files = files or [str(p.relative_to(ROOT)) for p in KUBE.rglob("*") if p.is_file()]
    assert not [f for f in files if f.endswith("secrets.env")], "secrets.env is committed"
    for name in files:
        if name.endswith((".yaml", ".yml")):
            for doc in yaml.safe_load_all((ROOT / name).read_text()):
                assert not (isinstance(doc, dict) and doc.get("kind") == "Secret"), (
                    f"{name} holds a Secret"
                )
    example = (KUBE / "base" / "secrets.env.example").read_text()
    assert set(SECRETS) == {
        line.split("=", 1)[0] for line in example.splitlines() if line and line[0] != "#"
    }
    for overlay, manifests in rendered.items():
        secrets = [m for m in manifests if m["kind"] == "Secret"]
        assert len(secrets) == 1, overlay
        data = {k: base64.b64decode(v).decode() for k, v in secrets[0]["data"].items()}
        assert data == SECRETS
        # Containers take them by reference: no value appears anywhere else.
        others = yaml.safe_dump_all([m for m in manifests if m["kind"] != "Secret"])
        for value in filter(None, SECRETS.values()):
            assert value not in others


# --- network policies -------------------------------------------------------------------


def test_sandbox_pods_have_no_egress_at_all(rendered: dict[str, Manifests]) -> None:
    for overlay, manifests in rendered.items():
        sandbox = pod_labels(manifests)["sandbox"]
        policies = policies_of(manifests, sandbox)
        denying = [p for p in policies if "Egress" in p["spec"].get("policyTypes", [])]
        assert denying, f"{overlay}: no egress policy selects the sandbox pods"
        for policy in policies:
            rules = policy["spec"].get("egress") or []
            assert not rules, f"{overlay}: {policy['metadata']['name']} opens sandbox egress"


def test_only_rollout_pods_reach_sandbox_pods(rendered: dict[str, Manifests]) -> None:
    for overlay, manifests in rendered.items():
        pods = pod_labels(manifests)
        policies = policies_of(manifests, pods["sandbox"])
        assert any("Ingress" in p["spec"].get("policyTypes", []) for p in policies)
        for policy in policies:
            for rule in policy["spec"].get("ingress") or []:
                peers = rule.get("from") or []
                assert peers, f"{overlay}: {policy['metadata']['name']} admits any source"
                for peer in peers:
                    assert set(peer) == {"podSelector"}, f"{overlay}: {peer} reaches the sandbox"
                    admitted = {
                        n for n, labels in pods.items() if selects(peer["podSelector"], labels)
                    }
                    assert admitted == {"rollout"}, f"{overlay}: {admitted} reach the sandbox"
        # And the rollout side may call it (a policy is an allow-list at both ends).
        rollout_egress = [
            peer["podSelector"]
            for p in policies_of(manifests, pods["rollout"])
            for rule in p["spec"].get("egress") or []
            for peer in rule.get("to") or []
            if "podSelector" in peer
        ]
        assert any(selects(s, pods["sandbox"]) for s in rollout_egress)


def test_every_fleet_pod_is_under_a_default_deny(rendered: dict[str, Manifests]) -> None:
    for manifests in rendered.values():
        deny = named(manifests, "NetworkPolicy", "artfleet-default-deny")["spec"]
        assert deny["policyTypes"] == ["Ingress", "Egress"]
        assert not deny.get("ingress") and not deny.get("egress")
        for name, labels in pod_labels(manifests).items():
            assert selects(deny["podSelector"], labels), f"{name} is outside the default deny"


# --- workloads ---------------------------------------------------------------------------


def test_every_container_has_requests_limits_and_probes(rendered: dict[str, Manifests]) -> None:
    for overlay, manifests in rendered.items():
        for workload in workloads(manifests):
            spec = workload["spec"]["template"]["spec"]
            for container in spec["containers"] + spec.get("initContainers", []):
                where = f"{overlay}: {workload['metadata']['name']}/{container['name']}"
                resources = container.get("resources", {})
                for part in ("requests", "limits"):
                    assert {"cpu", "memory"} <= set(resources.get(part, {})), f"{where} {part}"
                if container in spec.get("initContainers", []):
                    continue
                assert "readinessProbe" in container and "livenessProbe" in container, where


def test_grpc_services_are_probed_over_grpc_health_and_http_ones_over_http(
    rendered: dict[str, Manifests],
) -> None:
    for manifests in rendered.values():
        for workload in workloads(manifests):
            for container in containers(workload):
                ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
                probes = [container[k] for k in container if k.endswith("Probe")]
                # Our gRPC services: grpc.health.v1 (artfleet.runtime.rpc.server), by the
                # kubelet or, where one pod spec has two roles (gpu-multinode's trainer), by
                # the health check compose runs (test_kubernetes_multinode runs that probe).
                if "grpc" in ports:
                    assert all(
                        p.get("grpc", {}).get("port") == ports["grpc"]
                        or HEALTHCHECK in " ".join(p.get("exec", {}).get("command", []))
                        for p in probes
                    )
                if "http" in ports:
                    assert all(p.get("httpGet", {}).get("port") == "http" for p in probes)


HEALTHCHECK = "python -m artfleet.runtime.healthcheck"


def test_names_ports_and_images_are_composes(rendered: dict[str, Manifests]) -> None:
    # The sandbox runs the local backend here: the Docker backend's settings, and Redis
    # (which the sandbox does not use), stay out of the pod that runs the model's commands.
    # The CPU stack keeps the GPU's memory share and LoRA sizing (merged mode there) it
    # does not use.
    sandbox_not_here = {"ARTFLEET_SANDBOX_IMAGE", "ARTFLEET_DEPLOYMENT", "ARTFLEET_REDIS_URL"}
    not_here = {
        **{(overlay, "sandbox"): sandbox_not_here for overlay in OVERLAYS},
        ("cpu", "inference"): {
            "ARTFLEET_INFERENCE_GPU_MEMORY_UTILIZATION",
            "ARTFLEET_INFERENCE_TENANTS",
        },
    }
    for overlay, manifests in rendered.items():
        services = compose_services(overlay)
        for workload in workloads(manifests):
            name = workload["metadata"]["name"]
            service = services[name]
            container = containers(workload)[0]
            assert container["image"] == service["image"].replace(
                "${ARTFLEET_TAG:-latest}", "latest"
            )
            missing = set(service["environment"]) - env_names(manifests, container)
            assert missing == not_here.get((overlay, name), set()), (
                f"{overlay}: {name} lacks {missing}"
            )
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            port = env.get("ARTFLEET_PORT") or service["environment"].get("ARTFLEET_PORT")
            if name != "redis":
                assert str(port) in {str(p["containerPort"]) for p in container["ports"]}


def test_prometheus_scrapes_what_compose_and_prometheus_yml_name(
    rendered: dict[str, Manifests],
) -> None:
    config = yaml.safe_load((ROOT / "prometheus" / "prometheus.yml").read_text())
    jobs = {
        job["job_name"]: job["dns_sd_configs"][0]["port"]
        for job in config["scrape_configs"]
        if "dns_sd_configs" in job
    }
    for manifests in rendered.values():
        annotated = {
            w["metadata"]["name"]: w["spec"]["template"]["metadata"].get("annotations", {})
            for w in workloads(manifests)
        }
        for job, port in jobs.items():
            assert annotated[job].get("prometheus.io/scrape") == "true", job
            assert annotated[job]["prometheus.io/port"] == str(port), job
            ports = containers(workload_named(manifests, job))[0]["ports"]
            metrics = {p["containerPort"] for p in ports}
            assert port in metrics, job


@pytest.mark.parametrize(
    ("setting", "workload"),
    [("ARTFLEET_SANDBOX_TARGET", "sandbox"), ("ARTFLEET_ROLLOUT_TARGET", "rollout")],
)
def test_replicated_targets_resolve_to_every_replica(
    rendered: dict[str, Manifests], setting: str, workload: str
) -> None:
    for manifests in rendered.values():
        config = named(
            manifests,
            "ConfigMap",
            next(m["metadata"]["name"] for m in manifests if m["kind"] == "ConfigMap"),
        )
        host, port = config["data"][setting].rsplit(":", 1)
        service = named(manifests, "Service", host)["spec"]
        assert service["clusterIP"] == "None"  # headless: one address per ready pod
        assert selects({"matchLabels": service["selector"]}, pod_labels(manifests)[workload])
        assert int(port) in {p["port"] for p in service["ports"]}


def test_rollout_autoscales_and_every_workload_has_a_disruption_budget(
    rendered: dict[str, Manifests],
) -> None:
    for manifests in rendered.values():
        hpa = named(manifests, "HorizontalPodAutoscaler", "rollout")["spec"]
        assert hpa["scaleTargetRef"] == {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": "rollout",
        }
        budgets = [m["spec"]["selector"] for m in manifests if m["kind"] == "PodDisruptionBudget"]
        for name, labels in pod_labels(manifests).items():
            assert sum(selects(b, labels) for b in budgets) == 1, name


def test_gpu_overlay_requests_gpus_and_cpu_overlay_none(rendered: dict[str, Manifests]) -> None:
    def gpus(manifests: Manifests) -> dict[str, str]:
        return {
            w["metadata"]["name"]: c["resources"]["limits"]["nvidia.com/gpu"]
            for w in workloads(manifests)
            for c in containers(w)
            if "nvidia.com/gpu" in c["resources"].get("limits", {})
        }

    assert gpus(rendered["gpu"]) == {"trainer": "1", "inference": "1"}
    assert gpus(rendered["gpu-multinode"]) == {"trainer": "8", "inference": "1"}  # per pod
    assert gpus(rendered["cpu"]) == {}
    for manifests in rendered.values():
        trainer = workload_named(manifests, "trainer")["spec"]["template"]["spec"]
        claims = [
            v["persistentVolumeClaim"]["claimName"]
            for v in trainer["volumes"]
            if "persistentVolumeClaim" in v
        ]
        assert claims == ["trainer-data"]
        named(manifests, "PersistentVolumeClaim", "trainer-data")


def test_settings_the_manifests_add_are_settings_the_services_read(
    rendered: dict[str, Manifests],
) -> None:
    """Settings ignore unknown variables: a misspelt name here would be silently dropped."""
    settings = {
        "trainer": "artfleet_trainer.settings:TrainerSettings",
        "inference": "artfleet_inference.settings:InferenceSettings",
        "rollout": "artfleet_rollout.settings:RolloutSettings",
        "reward": "artfleet_reward.settings:RewardSettings",
        "sandbox": "artfleet_sandbox.settings:SandboxSettings",
        "api": "artfleet_api.settings:ApiSettings",
    }
    for overlay, manifests in rendered.items():
        services = compose_services(overlay)
        for name, where in settings.items():
            module, cls = where.split(":")
            model = getattr(importlib.import_module(module), cls)
            prefix = model.model_config["env_prefix"]
            known = {prefix + field.upper() for field in model.model_fields}
            if not known & TRAIN_LAUNCH:
                known |= TRAIN_LAUNCH
            container = containers(workload_named(manifests, name))[0]
            added = env_names(manifests, container) - set(services[name]["environment"])
            unknown = {n for n in added if n.startswith("ARTFLEET_")} - known
            assert not unknown, f"{overlay}: {name} reads no {unknown}"


def test_the_sandbox_image_carries_the_bubblewrap_its_pods_require(
    rendered: dict[str, Manifests],
) -> None:
    for manifests in rendered.values():
        sandbox = containers(named(manifests, "Deployment", "sandbox"))[0]
        env = {e["name"]: e.get("value") for e in sandbox["env"]}
        assert env["ARTFLEET_SANDBOX_BACKEND"] == "local"
        assert env["ARTFLEET_USE_BWRAP"] == "require"  # never unconfined
        pod = named(manifests, "Deployment", "sandbox")["spec"]["template"]["spec"]
        assert pod["hostUsers"] is False and pod["automountServiceAccountToken"] is False
    dockerfile = (ROOT / "services" / "sandbox" / "Dockerfile").read_text()
    assert "bubblewrap" in dockerfile.split("# --- end of the shared stage")[1]
