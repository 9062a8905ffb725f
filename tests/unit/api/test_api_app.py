"""The API app without a fleet behind it: auth on every route, errors naming the field,
health answering 503, the HTTP training API's fields mapped onto the job spec, trajectory files."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_policy import fake_policy
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from repo_paths import FIXTURES
from starlette.routing import Mount

from artfleet.runtime.service import free_port
from artfleet.specs.job import spec_to_proto
from artfleet_api.app import create_app
from artfleet_api.mapping import batch_shape, train_spec
from artfleet_api.models import TrainRequest
from artfleet_api.settings import ApiSettings

TOKEN = "unit-test-token-0123456789"
TRAJECTORIES = FIXTURES / "trajectories"
# The API's description has no data and no secrets: a browser opens it without a token.
DOCS = {"/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"}
OPEN = {"/health", *DOCS}


def _settings(tmp_path: Path, **extra: object) -> ApiSettings:
    down = f"127.0.0.1:{free_port()}"  # nothing listens there
    values: dict[str, object] = {
        "api_token": TOKEN,
        "redis_url": f"redis://127.0.0.1:{free_port()}/0",
        "trainer_target": down,
        "rollout_target": down,
        "reward_target": down,
        "sandbox_target": down,
        "policy_base_url": f"http://{down}/v1",
        "trajectories_dir": str(tmp_path / "logs"),
        "health_timeout_s": 1.0,
        "rpc_timeout_s": 2.0,
    }
    return ApiSettings(**{**values, **extra})  # type: ignore[arg-type]


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    shutil.copytree(TRAJECTORIES, tmp_path / "logs")
    with TestClient(create_app(_settings(tmp_path))) as client:
        yield client


AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _concrete(path: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: "1" if m.group(1) == "step" else "x", path)


def _flat(routes: list[Any]) -> Iterator[Any]:
    """app.routes, with routers included by include_router (FastAPI >= 0.16x keeps them
    as one entry each, without a prefix here) opened up."""
    for route in routes:
        included = getattr(route, "original_router", None)
        yield from _flat(included.routes) if included is not None else [route]


def _routes(client: TestClient) -> list[tuple[str, str]]:
    found = []
    for route in _flat(client.app.routes):  # type: ignore[attr-defined]
        if isinstance(route, APIRoute):
            found += [(method, route.path) for method in sorted(route.methods or ())]
        elif isinstance(route, Mount):
            assert route.path == "/static", f"unexpected mount {route.path}"
        else:  # FastAPI's own docs routes are plain Routes
            found += [(m, route.path) for m in sorted(getattr(route, "methods", None) or ["GET"])]
    return found


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}]
)
def test_every_route_but_health_docs_and_console_needs_the_token(
    client: TestClient, headers: dict[str, str]
) -> None:
    routes = _routes(client)
    assert ("POST", "/train") in routes and ("GET", "/openapi.json") in routes
    for method, path in routes:
        if path in OPEN or path == "/" or method == "HEAD":
            continue
        response = client.request(method, _concrete(path), headers=headers, json={})
        assert response.status_code == 401, (method, path, response.text)
        # The Tinker-compatible API takes the token as X-API-Key too.
        named = "X-API-Key" if path.startswith("/api/v1/") else "Authorization"
        assert response.json()["field"] == named
    assert client.get("/").status_code == 200  # the console's page and assets are open
    assert client.get("/static/console.js").status_code == 200


def test_docs_open_in_a_browser_without_a_token(client: TestClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200 and "swagger" in page.text.lower()
    schema = client.get("/openapi.json")
    assert schema.status_code == 200
    # ...and the page can send the token: the schema says every data route needs it.
    body = schema.json()
    assert body["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert body["security"] == [{"bearer": []}]
    assert body["paths"]["/health"]["get"]["security"] == []
    assert "security" not in body["paths"]["/jobs"]["get"]  # the global requirement applies
    assert "401" in body["paths"]["/metrics"]["get"]["responses"]  # every secured route's


def test_health_is_open_and_503_with_each_dependency_down(client: TestClient) -> None:
    response = client.get("/health")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unhealthy"
    # The HTTP training API's fields: unknown (null) while the services that know are down.
    assert (body["art_backend"], body["openai_configured"], body["wandb_configured"]) == (
        None,
        None,
        None,
    )
    assert body["plugins"] is None  # no rollout replica answered
    assert set(body["dependencies"]) == {
        "trainer",
        "rollout",
        "reward",
        "sandbox",
        "redis",
        "inference",
    }
    assert not any(d["ok"] for d in body["dependencies"].values())


def test_health_reports_the_policy_endpoint_as_its_clients_reach_it(tmp_path: Path) -> None:
    """The inference service is HTTP: /health lists its models with the fleet token, so a
    policy still loading (or one refusing this fleet's token) is a 503 naming it."""
    with fake_policy(TOKEN) as policy:
        settings = _settings(tmp_path, policy_base_url=policy.base_url)
        with TestClient(create_app(settings)) as client:
            serving = client.get("/health").json()["dependencies"]["inference"]
            policy.serving = False
            loading = client.get("/health")
            policy.serving, policy.token = True, "another-fleets-token"
            refused = client.get("/health").json()["dependencies"]["inference"]
    assert serving == {"ok": True, "detail": f"serves 1 model(s) at {policy.base_url}/models"}
    assert loading.status_code == 503
    assert loading.json()["dependencies"]["inference"]["ok"] is False
    assert refused["ok"] is False and "token is refused" in refused["detail"]


def test_unreachable_trainer_is_503_json_not_a_traceback(client: TestClient) -> None:
    response = client.get("/jobs", headers=AUTH)
    assert response.status_code == 503
    assert response.json()["error"].startswith("UNAVAILABLE")


OK_TRAJECTORY = {"messages": [{"role": "user", "content": "hi"}]}
# Messages the trajectory proto cannot carry, and the field the 422 names (the message is
# the second trajectory's first).
BAD_MESSAGES = [
    (
        {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
        "trajectories[1].messages[0].tool_calls[0].function.arguments",
    ),
    ({"role": "assistant", "tool_calls": "f()"}, "trajectories[1].messages[0].tool_calls"),
    ({"role": "assistant", "tool_calls": [3]}, "trajectories[1].messages[0].tool_calls[0]"),
    (
        {"role": "tool", "content": "x", "tool_call_id": 7},
        "trajectories[1].messages[0].tool_call_id",
    ),
]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/train", {"model_name": "Bad Name!", "project": "p"}, "model_name"),
        ("/train", {"model_name": "m", "project": "p", "num_steps": 0}, "num_steps"),
        ("/train", {"model_name": "m", "project": "p", "batch_size": "many"}, "batch_size"),
        ("/train", {"model_name": "m", "project": "p", "surprise": 1}, "surprise"),
        ("/train", {"spec": {"steps": -1}}, "spec.steps"),
        ("/train", {"spec": {"bogus": 1}}, "spec.bogus"),
        ("/train", {"spec": {"reward": [{"name": "ruler"}]}}, "spec.reward[0]"),
        ("/train", {"model_name": "m", "project": "p", "finetune": "partial"}, "finetune"),
        ("/train", {"spec": {"finetune": "full", "backend": "art"}}, "spec.finetune"),
        (
            "/train",
            {"spec": {"off_policy_correction": {"mode": "tis", "cap": 0.5}}},
            "spec.off_policy_correction.cap",
        ),
        (
            "/train",
            {"spec": {"off_policy_correction": {"mode": "sequence_mask", "band_low": 3}}},
            "spec.off_policy_correction.band_low",
        ),
        ("/rollout", {"model_name": "m", "project": "p", "num_rollouts": 0}, "num_rollouts"),
        ("/rollout", {"project": "p"}, "model_name"),
        ("/evaluate", {"trajectories": []}, "trajectories"),
        ("/evaluate", {"trajectories": [{"messages": "hi"}]}, "trajectories[0].messages"),
        *[
            ("/evaluate", {"trajectories": [OK_TRAJECTORY, {"messages": [message]}]}, field)
            for message, field in BAD_MESSAGES
        ],
    ],
)
def test_bad_bodies_get_422_naming_the_field(
    client: TestClient, path: str, body: dict[str, object], field: str
) -> None:
    response = client.post(path, json=body, headers=AUTH)
    assert response.status_code == 422, response.text
    named = response.json()["field"]
    assert named.endswith(field) or named.startswith(field), (named, field)
    assert not named.startswith(("TrainRequest", "JobSubmit", "spec.spec")), named
    if field.startswith("trajectories[1]"):  # ours, not pydantic's: named exactly
        assert named == field


def test_a_hud_config_entrys_unknown_key_is_named(client: TestClient) -> None:
    server = {"local": {"command": "artfleet-mcp-2048"}}
    entry = {"mcp_config": server, "max_turns": 5, "max_steps": 3}
    response = client.post("/train", json={"spec": {"environments": {"2048": entry}}}, headers=AUTH)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "spec.environments.2048.max_steps"
    assert "unknown key; known: mcp_config, max_turns, taskset" in response.json()["error"]


def test_a_spec_bodys_unknown_key_is_named_as_sent(client: TestClient) -> None:
    response = client.post("/train", json={"spec": {"bogus": 1}}, headers=AUTH)
    assert response.status_code == 422
    assert response.json()["field"] == "spec.bogus"
    assert response.json()["error"].startswith("spec.bogus:")


@pytest.mark.parametrize("path", ["/train", "/rollout", "/evaluate"])
def test_a_form_encoded_body_is_415_naming_the_content_type(client: TestClient, path: str) -> None:
    response = client.post(path, data={"model_name": "m", "project": "p"}, headers=AUTH)
    assert response.status_code == 415, response.text
    body = response.json()
    assert body["field"] == "Content-Type"
    assert "application/x-www-form-urlencoded" in body["error"]


def test_a_body_that_is_not_json_is_400_naming_the_body(client: TestClient) -> None:
    response = client.post(
        "/train", content=b"D[\xff", headers={**AUTH, "content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["field"] == "body"


def test_bad_last_event_id_is_422(client: TestClient) -> None:
    for path in ("/jobs/x/stream", "/train/p/m/stream"):
        response = client.get(path, headers={**AUTH, "Last-Event-ID": "nope"})
        assert response.status_code == 422
        assert response.json()["field"] == "Last-Event-ID"


def test_tinker_api_body_becomes_a_job_spec_with_ruler(tmp_path: Path) -> None:
    settings = _settings(tmp_path, judge_model_map={"gpt-4o": "policy"})
    request = TrainRequest.model_validate(
        {
            "model_name": "my-agent-v1",
            "project": "my-project",
            "base_model": "Qwen/Qwen2.5-7B-Instruct",
            "num_steps": 5,
            "batch_size": 8,
            "learning_rate": 1e-5,
            "use_ruler": True,
            "judge_model": "gpt-4o",
            "task_prompt": "You are a helpful assistant that solves problems step by step.",
        }
    )
    spec = train_spec(request, settings, agent="terminal")
    assert (spec.name, spec.project, spec.steps) == ("my-agent-v1", "my-project", 5)
    assert (spec.groups_per_step, spec.rollouts_per_group) == (2, 4)
    assert spec.task_prompt.startswith("You are a helpful assistant")
    assert [s.name for s in spec.reward] == ["process", "task_check", "ruler"]
    assert spec.reward[2].params == {"judge": "policy"}
    hosted = train_spec(request, _settings(tmp_path), agent="terminal")
    assert hosted.reward[2].params["judge"]["model"] == "gpt-4o"
    assert hosted.reward[2].params["judge"]["api_key_env"] == "OPENAI_API_KEY"
    # The trainer maps and checks the base model (its files): the API passes it on.
    assert spec.base_model == "Qwen/Qwen2.5-7B-Instruct"
    assert spec.finetune == "lora"  # the job spec's default
    full = TrainRequest(model_name="m", project="p", use_ruler=False, finetune="full")
    assert train_spec(full, settings, agent="terminal").finetune == "full"


def test_a_body_without_ruler_leaves_the_reward_to_the_trainer(tmp_path: Path) -> None:
    # The trainer writes out the environment's defaults (an MCP environment's evaluate
    # tool); a reward written here would be the terminal agent's whatever the environment.
    request = TrainRequest.model_validate(
        {"model_name": "m", "project": "p", "environment": "game-2048", "use_ruler": False}
    )
    spec = train_spec(request, _settings(tmp_path), agent="mcp")
    assert "reward" not in spec.model_fields_set
    assert not spec_to_proto(spec).reward.scorers
    # RULER joins the defaults of the environment's agent kind.
    ruler = TrainRequest.model_validate({"model_name": "m", "project": "p", "use_ruler": True})
    mcp = train_spec(ruler, _settings(tmp_path), agent="mcp")
    assert [s.name for s in mcp.reward] == ["mcp_evaluate", "ruler"]


@pytest.mark.parametrize(
    ("batch", "rollouts", "shape"),
    [(8, None, (2, 4)), (2, None, (1, 2)), (5, None, (2, 4)), (9, 3, (3, 3)), (3, None, (1, 3))],
)
def test_batch_size_is_whole_groups(
    batch: int, rollouts: int | None, shape: tuple[int, int]
) -> None:
    assert batch_shape(batch, rollouts) == shape


def test_trajectories_list_filter_and_read(client: TestClient) -> None:
    listed = client.get("/trajectories", headers=AUTH).json()
    assert listed["experiments"] == ["shell-demo"]
    assert len(listed["trajectories"]) == 4
    best = client.get("/trajectories?min_reward=0.5&scenario=write-notes", headers=AUTH).json()
    assert [t["reward"] for t in best["trajectories"]] == [0.75]
    step2 = client.get("/trajectories?step=2", headers=AUTH).json()["trajectories"]
    assert {t["policy_version"] for t in step2} == {1}
    one = client.get("/trajectories/shell-demo/1/group0_rollout1.json", headers=AUTH).json()
    assert one["messages"][2]["tool_calls"][0]["function"]["name"] == "bash"
    assert one["metadata"] == {"scenario_id": "write-notes", "step": 1, "policy_version": 0}
    missing = client.get("/trajectories/shell-demo/1/nope.json", headers=AUTH)
    assert missing.status_code == 404 and missing.json()["field"] == "name"
    sneaky = client.get("/trajectories/..%2F..%2Fetc/1/passwd", headers=AUTH)
    assert sneaky.status_code in (404, 422)


def test_metrics_count_requests_by_route_template(client: TestClient) -> None:
    client.get("/trajectories/shell-demo/1/nope.json", headers=AUTH)
    text = client.get("/metrics", headers=AUTH).text
    assert (
        'artfleet_api_requests_total{method="GET",'
        'route="/trajectories/{experiment}/{step}/{name}",status="404"}'
    ) in text


def test_openapi_documents_every_model(client: TestClient) -> None:
    schema = client.get("/openapi.json", headers=AUTH).json()
    for name in ("TrainRequest", "RolloutRequest", "EvaluateRequest", "JobOut", "ErrorOut"):
        assert name in schema["components"]["schemas"]
    for name, model in schema["components"]["schemas"].items():
        assert model.get("properties") or model.get("enum") or model.get("anyOf"), name
