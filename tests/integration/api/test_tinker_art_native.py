"""ART 0.5.18's `TinkerNativeBackend` (tinker 0.18.2 and tinker-cookbook 0.3, in a
virtualenv of their own) against the fleet's Tinker-compatible API: a SmolLM2 model
registered (a LoRA and its step-0 sampler weights), rollouts through ART's own OpenAI
server (`model.openai_client()`, each chat completion a Tinker sample), and one training
step with ART's default loss (cispo) that saves the step-1 sampler weights."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest
from client_venvs import client_venv

from artfleet_cli.fleet import LocalFleet

VENV = "openpipe-art-0.5.18-tinker"
# openpipe-art[tinker]==0.5.18 pins torch==2.10.0, which PyPI serves for Linux only as the
# CUDA build (gigabytes): its `tinker` extra is listed here instead, with the CPU torch of
# pip's find-links. datrie, also in that extra, is imported nowhere in art (and builds
# from source), so it is left out.
REQUIREMENTS = [
    "torch==2.13.0",
    "openpipe-art==0.5.18",
    "tinker==0.18.2",
    "tinker-cookbook==0.3.0",
    "transformers==5.2.0",
    "fastapi>=0.128.0",
    "huggingface-hub",
    "numpy<2",
    "pillow",
    "pyarrow>=15.0.0",
    "pydantic>=2.12.5",
    "uvicorn>=0.35.0",
]
DRIVER = Path(__file__).parents[2] / "support" / "tinker_clients" / "art_native.py"
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _tokenizer_folder() -> Path:
    """SmolLM2's tokenizer files, written from the embedded model (there is no hub)."""
    from artfleet_trainer.torch_backend.model_loader import ensure_embedded_cache

    return ensure_embedded_cache()


def _run_driver(fleet: LocalFleet, art_path: Path) -> dict[str, object]:
    python = client_venv(VENV, REQUIREMENTS)
    env = {
        **os.environ,
        "TINKER_BASE_URL": fleet.api_url,
        "TINKER_API_KEY": f"tml-{fleet.token}",
        "TINKER_TELEMETRY": "0",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "disabled",
        "WEAVE_DISABLED": "true",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # litellm (an ART dependency) fetches it
    }
    done = subprocess.run(
        [str(python), str(DRIVER), SMOLLM2, str(_tokenizer_folder()), str(art_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
def test_arts_tinker_native_backend_trains_one_step(api_fleet: LocalFleet, tmp_path: Path) -> None:
    out = _run_driver(api_fleet, tmp_path / "art")
    assert out["step_before"] == 0
    assert out["step_trained"] == 1
    assert out["step_after"] == 1
    assert out["trajectories"] == 4
    assert len(set(out["rewards"])) > 1  # type: ignore[arg-type]  # a group with advantages
    for choice in out["choices"]:  # type: ignore[attr-defined]
        assert choice["tokens"] > 0
        assert choice["tokens"] == choice["logprobs"]
        assert all(math.isfinite(x) and x <= 0 for x in choice["logprob_values"])
    metrics = out["metrics"]
    assert metrics["data/step_num_datums"] == 4  # type: ignore[index]
    assert metrics["data/step_trainer_tokens"] > 0  # type: ignore[index]
    model_id = str(out["model_id"])
    assert out["sampler_paths"] == {
        "0": f"tinker://{model_id}/sampler_weights/step_000000",
        "1": f"tinker://{model_id}/sampler_weights/step_000001",
    }
    assert sorted(out["server_checkpoints"]) == [  # type: ignore[call-overload]
        "sampler_weights/step_000000",
        "sampler_weights/step_000001",
    ]
    assert out["after_step_choice_tokens"] > 0  # the step-1 sampler answers
