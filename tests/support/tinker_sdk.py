"""The `tinker` SDK's loop (tinker_clients/sdk_loop.py) run against a fleet, and what every
fleet must show of it: the fixed batch is learned, and the samples come from the saved
weights (the training client scores them as the sampler did), not from the base model."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

from client_venvs import client_venv

SDK = "tinker==0.38.0"
DRIVER = Path(__file__).parent / "tinker_clients" / "sdk_loop.py"
REFUSALS = Path(__file__).parent / "tinker_clients" / "refusals.py"


def run_sdk_loop(api_url: str, token: str, base_model: str) -> dict[str, Any]:
    out = run_driver(DRIVER, api_url, token, base_model)
    print("tinker SDK:", json.dumps({k: out[k] for k in ("losses", "checkpoints")}))
    return out


def run_driver(driver: Path, api_url: str, token: str, base_model: str) -> dict[str, Any]:
    """A driver script run by the SDK's own interpreter; the JSON of its last line."""
    python = client_venv("tinker-0.38.0", [SDK])
    env = {
        **os.environ,
        "TINKER_BASE_URL": api_url,
        "TINKER_API_KEY": f"tml-{token}",
        "TINKER_TELEMETRY": "0",
    }
    done = subprocess.run(
        [str(python), str(driver), base_model],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def assert_sdk_loop(out: dict[str, Any]) -> str:
    """Checks the loop's facts; returns its run (model) id."""
    losses = [float(x) for x in out["losses"]]
    assert losses[-1] < losses[0], losses  # the fixed batch is learned
    model_id = str(out["model_id"])
    assert out["sampler_path"] == f"tinker://{model_id}/sampler_weights/after"
    assert out["checkpoints"] == ["sampler_weights/after", "weights/state"]
    trained = out["trained"]
    for sequence, rescored in zip(trained, out["trained_rescored"], strict=True):
        assert len(sequence["tokens"]) == len(sequence["logprobs"]) > 0
        # the trainer's logprobs of what the sampler drew are the sampler's own: it sampled
        # the saved weights
        for sampled, scored in zip(sequence["logprobs"], rescored, strict=False):
            assert math.isclose(sampled, scored, abs_tol=0.05), (sampled, scored)
    assert [s["logprobs"] for s in out["base"]] != [s["logprobs"] for s in trained]
    return model_id
