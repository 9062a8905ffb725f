"""Every endpoint of the API against a real fleet (torch backend, tiny model): the HTTP
training API's requests as its README writes them, the SSE stream with a reconnect, jobs by
id, models, health, auth on every route. The trainer runs two jobs side by side here; the
tests run in order."""

from __future__ import annotations

import os
import re
from typing import Any

import httpx
import pytest
from sse import SseEvent, sse_events
from waiting import poll

from artfleet_cli.fleet import LocalFleet

pytestmark = [pytest.mark.integration]

# The HTTP training API's README examples, verbatim.
TRAIN_BODY = {
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
ROLLOUT_BODY = {
    "model_name": "data-gen",
    "project": "examples",
    "num_rollouts": 10,
    "task_prompt": "Generate diverse question-answer pairs for training.",
    "temperature": 0.8,
}
EVALUATE_BODY = {
    "trajectories": [
        {
            "messages": [
                {"role": "user", "content": "What is 2+2?"},
                {"role": "assistant", "content": "2+2 equals 4"},
            ]
        }
    ],
    "judge_model": "gpt-4o",
    "evaluation_prompt": "Rate the accuracy of this mathematical response.",
}
TERMINAL = {"succeeded", "failed", "cancelled"}
OPEN = {"/health", "/docs", "/redoc", "/openapi.json"}  # no data, no secrets


def _stream(
    api: httpx.Client, path: str, last_event_id: str | None = None, stop_after_step: int = 0
) -> list[SseEvent]:
    """Events until the job ends, or until `stop_after_step`'s step_done (then disconnects)."""
    headers = {"Last-Event-ID": last_event_id} if last_event_id is not None else {}
    events = []
    with api.stream("GET", path, headers=headers) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for event in sse_events(response):
            events.append(event)
            data = event.data
            if stop_after_step and event.event == "step_done" and data["step"] == stop_after_step:
                break
            if event.event == "state" and data["state"] in TERMINAL:
                break
    return events


def _wait_state(api: httpx.Client, job_id: str, states: set[str], timeout_s: float = 900) -> Any:
    return poll(
        lambda: api.get(f"/jobs/{job_id}").json(), lambda j: j["state"] in states, timeout_s
    )


def test_health_reports_every_dependency(api: httpx.Client) -> None:
    response = httpx.get(f"{api.base_url}/health")  # no token
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "healthy"
    assert {n for n, d in body["dependencies"].items() if d["ok"]} == {
        "trainer",
        "rollout",
        "reward",
        "sandbox",
        "redis",
        "inference",  # the policy endpoint: here the trainer's own server
    }
    # The HTTP training API's fields, from the services that know them.
    assert body["art_backend"] == "torch"
    assert body["openai_configured"] is bool(os.environ.get("OPENAI_API_KEY"))
    assert body["wandb_configured"] is False  # the fleet's trainer has no WANDB_API_KEY
    assert body["plugins"] == []  # a rollout replica answered: no plugin packages here


def test_training_api_train_streams_every_step_and_resumes(api: httpx.Client) -> None:
    response = api.post("/train", json=TRAIN_BODY)
    assert response.status_code == 202, response.text
    started = response.json()
    job_id = started["job_id"]
    assert started["stream_url"] == f"/jobs/{job_id}/stream"  # this job, not the model's newest
    spec = started["job"]["spec"]
    assert (spec["groups_per_step"], spec["rollouts_per_group"], spec["steps"]) == (2, 4, 5)
    assert spec["task_prompt"] == TRAIN_BODY["task_prompt"]
    assert [s["name"] for s in spec["reward"]["scorers"]][-1] == "ruler"

    first = _stream(api, started["stream_url"], stop_after_step=2)
    last_id = first[-1].id
    assert last_id is not None
    # Resumed by the model's name: its newest job is this one.
    rest = _stream(api, "/train/my-project/my-agent-v1/stream", last_event_id=last_id)
    events = first + rest
    seqs = [int(e.id) for e in events if e.id is not None]
    assert seqs == sorted(set(seqs)), "a resumed stream repeats or reorders nothing"
    assert int(rest[0].id or 0) == int(last_id) + 1, "it resumes right after Last-Event-ID"
    done = [e.data["step"] for e in events if e.event == "step_done"]
    assert done == [1, 2, 3, 4, 5]
    assert all(e.data["summary"]["trajectories"] > 0 for e in events if e.event == "step_done")
    assert events[-1].data["state"] == "succeeded"

    status = api.get("/train/my-project/my-agent-v1/status").json()
    assert status["id"] == job_id and status["state"] == "succeeded"
    assert status["completed_steps"] == 5 and status["policy"].endswith("@5")
    assert [s["step"] for s in status["steps"]] == [1, 2, 3, 4, 5]


def test_jobs_by_id_and_models(api: httpx.Client) -> None:
    jobs = api.get("/jobs").json()["jobs"]
    job = next(j for j in jobs if (j["project"], j["model_name"]) == ("my-project", "my-agent-v1"))
    assert job["experiment"] == "default"  # the job's own (job spec `experiment`)
    assert api.get(f"/jobs/{job['id']}").json()["id"] == job["id"]
    missing = api.get("/jobs/no-such-job")
    assert missing.status_code == 404 and "error" in missing.json()
    models = api.get("/models").json()["models"]
    mine = next(m for m in models if m["model_name"] == "my-agent-v1")
    assert mine["project"] == "my-project" and mine["policy"].endswith("@5")
    # Its checkpoints go (Trainer.ModelsDelete), and with them the model: as the CLI shows.
    deleted = api.delete("/models/my-project/my-agent-v1")
    assert deleted.status_code == 204, deleted.text
    names = {m["model_name"] for m in api.get("/models").json()["models"]}
    assert "my-agent-v1" not in names
    assert api.delete("/models/my-project/my-agent-v1").status_code == 404
    assert api.delete("/models/my-project/nobody").status_code == 404


def test_training_api_rollout_runs_a_group_without_training(
    api: httpx.Client, api_fleet: LocalFleet
) -> None:
    # The example's model must exist on the fleet first: one short training job makes it.
    small = {"model_name": "data-gen", "project": "examples", "num_steps": 1, "batch_size": 2}
    job = api.post("/train", json={**small, "use_ruler": False, "max_turns": 1}).json()
    assert _wait_state(api, job["job_id"], TERMINAL)["state"] == "succeeded"
    before = api.get(f"/jobs/{job['job_id']}").json()["completed_steps"]

    response = api.post("/rollout", json=ROLLOUT_BODY)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"].endswith("@1") and body["scenario_id"]
    assert len(body["trajectories"]) + len(body["errors"]) == 10
    assert all(t["messages"][0]["role"] == "system" for t in body["trajectories"])
    # The body's task_prompt is the system prompt of every episode.
    prompts = {t["messages"][0]["content"] for t in body["trajectories"]}
    assert prompts <= {ROLLOUT_BODY["task_prompt"]} and body["notes"] == []
    # Any OpenAI-compatible endpoint: here the trainer's, named explicitly.
    external = {
        "model_name": "data-gen",
        "project": "examples",
        "num_rollouts": 2,
        "max_turns": 1,
        "base_url": api_fleet.api_url.replace(
            str(api_fleet.ports["api"]), str(api_fleet.ports["inference"])
        )
        + "/v1",
        "model": body["model"],
    }
    response = api.post("/rollout", json=external)
    assert response.status_code == 200, response.text
    assert len(response.json()["trajectories"]) == 2
    assert api.get(f"/jobs/{job['job_id']}").json()["completed_steps"] == before  # no training
    # A body field, as /train answers it: 422 naming it.
    unknown = api.post("/rollout", json={**ROLLOUT_BODY, "environment": "no-such-env"})
    assert unknown.status_code == 422, unknown.text
    assert unknown.json()["field"] == "environment"


def test_training_api_evaluate_with_the_local_judge(api: httpx.Client) -> None:
    response = api.post("/evaluate", json=EVALUATE_BODY)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["judge"].startswith("policy (")
    assert len(body["scores"]) == 1
    score = body["scores"][0]
    # A random tiny judge may answer nonsense: then the failure is reported, not hidden.
    assert "judge" in score["components"] or body["outcome"]["failures"]
    ruler = {**EVALUATE_BODY, "use_ruler": True}
    ruler["trajectories"] = EVALUATE_BODY["trajectories"] * 2  # type: ignore[operator]
    response = api.post("/evaluate", json=ruler)
    assert response.status_code == 200, response.text
    assert len(response.json()["scores"]) == 2


def test_cancel_by_id_stops_the_job(api: httpx.Client) -> None:
    job = api.post("/train", json={**TRAIN_BODY, "model_name": "cancel-me", "num_steps": 50})
    job_id = job.json()["job_id"]
    events = []
    with api.stream("GET", f"/jobs/{job_id}/stream") as response:
        for event in sse_events(response):
            events.append(event)
            if event.event == "step_started":
                cancelled = api.post(f"/jobs/{job_id}/cancel")
                assert cancelled.status_code == 200
                assert cancelled.json()["state"] == "cancelling"
            if event.event == "state" and event.data["state"] in TERMINAL:
                break
    assert events[-1].data["state"] == "cancelled"
    assert api.get(f"/jobs/{job_id}").json()["completed_steps"] < 50


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**TRAIN_BODY, "environment": "no-such-env"}, "environment"),
        ({**TRAIN_BODY, "learning_rate": -1}, "learning_rate"),
        ({**TRAIN_BODY, "base_model": "Qwen/Qwen2.5-72B-Instruct"}, "base_model"),
        ({"spec": {"environment": "no-such-env"}}, "environment"),
        ({**TRAIN_BODY, "model_name": "Not A Slug"}, "model_name"),
        # A hosted judge whose key the reward service lacks (the trainer's ValidateSpec).
        pytest.param(
            {**TRAIN_BODY, "judge_model": "gpt-4o-mini"},
            "judge_model",
            marks=pytest.mark.skipif(
                "OPENAI_API_KEY" in os.environ, reason="OPENAI_API_KEY is set here"
            ),
        ),
    ],
)
def test_bad_bodies_get_422_naming_the_field(
    api: httpx.Client, body: dict[str, Any], field: str
) -> None:
    response = api.post("/train", json=body)
    assert response.status_code == 422, response.text
    assert field in (response.json()["field"] or ""), response.json()
    if field == "judge_model":  # the other way out: the fleet's own policy as the judge
        assert "ARTFLEET_JUDGE_MODEL_MAP" in response.json()["error"]


def test_every_route_but_health_and_docs_needs_the_token(
    api: httpx.Client, api_fleet: LocalFleet
) -> None:
    from artfleet_api.app import create_app
    from artfleet_api.settings import ApiSettings

    app = create_app(ApiSettings(api_token="only-to-list-the-routes"))  # type: ignore[arg-type]
    paths = set(app.openapi()["paths"]) | {"/openapi.json", "/docs", "/redoc"}
    assert len(paths) > 15
    schema = app.openapi()["paths"]
    checked = 0
    for path in sorted(paths):
        methods = [m.upper() for m in schema.get(path, {"get": {}})]
        for method in methods:
            url = re.sub(r"\{\w+\}", "1", path)
            for headers in ({}, {"Authorization": "Bearer wrong-token"}):
                response = httpx.request(
                    method, f"{api_fleet.api_url}{url}", headers=headers, json={}
                )
                expected = 200 if path in OPEN else 401
                assert response.status_code == expected, (method, path, response.text)
                checked += 1
    assert checked >= 2 * 17
