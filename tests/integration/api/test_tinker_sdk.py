"""The `tinker` SDK (0.38, in a virtualenv of its own) against the fleet's
Tinker-compatible API: SmolLM2 trained with forward_backward + optim_step on a fixed
supervised batch (the loss falls), its weights saved for sampling, and the samples come
from the saved weights (the training client scores them as the sampler did), not from the
base model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
from test_api_fleet import TRAIN_BODY as JOB
from tinker_sdk import REFUSALS, assert_sdk_loop, run_driver, run_sdk_loop
from waiting import poll

from artfleet_cli.fleet import LocalFleet

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the embedded default, not the tiny model


def test_the_tinker_sdk_trains_saves_and_samples_beside_a_job(
    api_fleet: LocalFleet, api: httpx.Client
) -> None:
    # A scheduled job trains on the same trainer meanwhile: both go on, in turn.
    body = {**JOB, "model_name": "beside-tinker", "num_steps": 2, "use_ruler": False}
    job = api.post("/train", json=body)
    assert job.status_code == 202, job.text
    out = run_sdk_loop(api_fleet.api_url, api_fleet.token, SMOLLM2)
    model_id = assert_sdk_loop(out)
    finished = poll(
        lambda: api.get(f"/jobs/{job.json()['job_id']}").json(),
        lambda j: j["state"] in {"succeeded", "failed", "cancelled"},
        timeout_s=900,
    )
    assert finished["state"] == "succeeded", finished
    # `artfleet models list` shows the run, under the experiment tinker
    listed = subprocess.run(
        [sys.executable, "-m", "artfleet_cli.main", "models", "list", "--json"],
        env={**os.environ, **api_fleet.endpoints()},
        capture_output=True,
        text=True,
        check=True,
    )
    runs = {m["name"]: m for m in json.loads(listed.stdout) if m["experiment"] == "tinker"}
    run = runs[model_id.replace(":", "-")]
    assert run["tinker_run"] == {"training_run_id": model_id, "lora_rank": 8}, run
    assert run["base_model"] == SMOLLM2 and not run["job_id"], run


def test_no_refused_call_leaves_the_sdk_waiting(api_fleet: LocalFleet) -> None:
    """Bad calls through the real SDK (tests/support/tinker_clients/refusals.py): each is
    refused with a 4xx naming what is wrong, and the client's next call completes."""
    out = run_driver(REFUSALS, api_fleet.api_url, api_fleet.token, SMOLLM2)
    print("tinker SDK refusals:", json.dumps(out))
    assert out.pop("optim_step_after") is True
    assert out.pop("context") == 8192  # SmolLM2's, on the torch engine: train and sample
    for name, refusal in out.items():
        assert refusal["refused"], (name, refusal)
        assert refusal["status"] == 400, (name, refusal)
        assert refusal["next_completed"], (name, refusal)
    assert "data[0].loss_fn_inputs.target_tokens" in out["target_outside_vocab"]["error"]
    assert "data[0].model_input" in out["input_outside_vocab"]["error"]
    assert "sampling_params.max_tokens" in out["sample_max_tokens_0"]["error"]
    # past the context: refused at the request (a 400 naming the field), not in its future
    assert "sampling_params.max_tokens" in out["sample_past_context"]["error"]
    assert "at most 8180" in out["sample_past_context"]["error"]


def _poll_future(client: httpx.Client, request_id: str) -> httpx.Response:
    """retrieve_future until it answers something other than try_again (or a 5xx while
    the trainer is away, which the SDK polls through too)."""

    def answer() -> httpx.Response:
        return client.post("/api/v1/retrieve_future", json={"request_id": request_id})

    def settled(reply: httpx.Response) -> bool:
        return reply.status_code < 500 and reply.json().get("type") != "try_again"

    return poll(answer, settled, timeout_s=600, interval_s=0.5)


def test_a_trainer_restart_keeps_saved_weights_and_fails_open_futures_retryably(
    api_fleet: LocalFleet,
) -> None:
    headers = {"X-API-Key": f"tml-{api_fleet.token}"}
    with httpx.Client(base_url=api_fleet.api_url, headers=headers, timeout=120) as client:
        session = client.post("/api/v1/create_session", json={"tags": [], "sdk_version": "t"})
        session_id = session.json()["session_id"]
        create = {
            "session_id": session_id,
            "model_seq_id": 0,
            "base_model": SMOLLM2,
            "lora_config": {"rank": 4},
        }
        promise = client.post("/api/v1/create_model", json=create).json()
        model_id = _poll_future(client, promise["request_id"]).json()["model_id"]
        save = {"model_id": model_id, "seq_id": 1, "path": "before-restart"}
        saved = _poll_future(
            client, client.post("/api/v1/save_weights", json=save).json()["request_id"]
        )
        path = saved.json()["path"]
        step = {"model_id": model_id, "seq_id": 2, "adam_params": {"learning_rate": 1e-4}}
        open_future = client.post("/api/v1/optim_step", json=step).json()["request_id"]

        api_fleet.restart("trainer")

        lost = _poll_future(client, open_future)
        assert lost.status_code == 410, lost.text  # retryable: never a hang
        assert "restarted" in lost.json()["detail"]
        gone = client.post("/api/v1/get_info", json={"model_id": model_id, "type": "get_info"})
        assert gone.status_code == 404, gone.text  # the client is gone, its weights are not
        listed = client.get(f"/api/v1/training_runs/{model_id}/checkpoints").json()
        assert [c["checkpoint_id"] for c in listed["checkpoints"]] == ["weights/before-restart"]
        again = client.post("/api/v1/create_session", json={"tags": [], "sdk_version": "t"})
        load = {
            "session_id": again.json()["session_id"],
            "model_seq_id": 0,
            "path": path,
            "optimizer": True,
        }
        resumed = _poll_future(
            client, client.post("/api/v1/load_weights", json=load).json()["request_id"]
        )
        assert resumed.status_code == 200 and "error" not in resumed.json(), resumed.text
