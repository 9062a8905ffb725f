"""Checks of a policy endpoint before an evaluation runs samples: that `--model` is a
name and `--base-url` a URL (usage errors, exit 2), then `Rollout.CheckPolicy`: whether the
endpoint answers from the rollout workers (exit 1 naming the URL), takes the key and
serves the model (exit 2, with what it does serve)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from artfleet.contracts.checkpoint_layout import served_name_of
from artfleet.v1 import rollout_pb2, rollout_pb2_grpc
from artfleet_cli.client import fail

MODEL_HINT = (
    "a base model's name (e.g. smollm2-135m-instruct), a checkpoint as name@step, or a "
    "model name alone for its latest checkpoint (`artfleet models list` shows them)"
)
_PATH_STARTS = ("/", "./", "../", "~", ".\\")


def shown_url(url: str) -> str:
    """The URL without user info, query or fragment: what a message may show."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def check_base_url(base_url: str) -> None:
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        fail(
            f"--base-url {shown_url(base_url) or base_url!r} is not an http(s) URL; "
            "give the endpoint as the rollout workers reach it, e.g. http://trainer:8000/v1"
        )


def check_model_name(model: str) -> None:
    """A path (what `--model_path` users type) is not a model name: say what to type."""
    looks_like_path = model.startswith(_PATH_STARTS) or model.endswith("/")
    if not looks_like_path and "/" in model:
        # A hub id is not on this disk; a checkpoint path copied from the trainer's machine
        # is not either, but it has the checkpoint layout (a hub id has two parts).
        at_step = "@" in (served_name_of(model) or "")
        looks_like_path = at_step or Path(model).expanduser().exists()
    if not looks_like_path:
        return
    name = served_name_of(model.rstrip("/"))
    instead = MODEL_HINT
    if name and "@" in name:
        instead = f"--model {name}"
    elif name:  # `.../models/<name>`: a trained model's folder, or any folder named so
        instead = f"--model {name} if it is a trained model (its latest checkpoint), else {instead}"
    fail(f"--model takes a model name the endpoint serves, not a path ({model}); use {instead}")


def check_policy(
    stub: rollout_pb2_grpc.RolloutStub, base_url: str, model: str, api_key_env: str
) -> str:
    """Fails (exit 1 unreachable, 2 refused key or unknown model) unless the endpoint
    serves the model, as the rollout workers see it; returns the name it served it as
    (`name@best` → `name@3`; "" when it did not say)."""
    request = rollout_pb2.CheckPolicyRequest(
        model_base_url=base_url, policy=model, model_api_key_env=api_key_env
    )
    answer = stub.CheckPolicy(request, timeout=120)
    url = shown_url(base_url)
    error = answer.error.replace(base_url, url)
    if not answer.reachable:
        fail(f"cannot reach the policy endpoint {url} from the rollout service: {error}", 1)
    if not answer.authorized:
        key = f"the key in {api_key_env}" if api_key_env else "the fleet token"
        fail(f"the policy endpoint {url} refused {key} (--api-key-env): {error}")
    if not answer.served:
        listed = ", ".join(answer.models) or "none"
        fail(
            f"model {model!r} is not served at {url} ({error}); it lists: {listed}. "
            f"--model takes {MODEL_HINT}"
        )
    return answer.served_as
