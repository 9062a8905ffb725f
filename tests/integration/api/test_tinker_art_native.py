"""ART 0.5.18's `TinkerNativeBackend` (tinker 0.18.2 and tinker-cookbook 0.3, in a
virtualenv of their own) against the fleet's Tinker-compatible API: a SmolLM2 model
registered (a LoRA and its step-0 sampler weights), rollouts through ART's own OpenAI
server (`model.openai_client()`, each chat completion a Tinker sample), one training step
with ART's default loss (cispo) that saves the step-1 training state and sampler weights
and makes the best rollout likelier (scored by tinker 0.18's `forward`), and a restarted
script that resumes from that state and answers as the trained model did."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

from client_venvs import HEAVY_CLIENTS, client_venv
from repo_paths import SUPPORT
from test_tinker_cookbook import renderer_check

from artfleet_cli.fleet import LocalFleet

VENV = "openpipe-art-0.5.18-tinker"
# openpipe-art[tinker]==0.5.18 pins torch==2.10.0, which PyPI serves for Linux only as the
# CUDA build (gigabytes): its `tinker` extra is listed here instead, with the CPU torch of
# pip's find-links. datrie, also in that extra, is imported nowhere in art (and builds
# from source), so it is left out. openai 3 (which ART's openai>=2.14 lets in) runs on
# httpx2, and ART 0.5.18 hands its client an httpx.Timeout, which httpx2 cannot add to a
# deadline (TypeError at the first request): openai stays at the 2.x of the fleet's venv.
REQUIREMENTS = [
    "torch==2.13.0",
    "openpipe-art==0.5.18",
    "openai==2.54.0",
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
DRIVER = SUPPORT / "tinker_clients" / "art_native.py"
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
MODEL = "smollm2-tinker-native"  # the driver's ART model


def _tokenizer_folder() -> Path:
    """SmolLM2's tokenizer files, written from the embedded model (there is no hub)."""
    from artfleet.contracts.embedded_model import ensure_embedded_cache

    return ensure_embedded_cache()


def _run_driver(fleet: LocalFleet, art_path: Path) -> dict[str, Any]:
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
    art_path.mkdir(parents=True)
    done = subprocess.run(
        [str(python), str(DRIVER), SMOLLM2, str(_tokenizer_folder()), str(art_path)],
        env=env,
        cwd=art_path,  # ART reads a .env from its working directory
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@HEAVY_CLIENTS
def test_the_smollm2_renderer_renders_smollm2s_chat_template_under_cookbook_0_3() -> None:
    out = renderer_check(client_venv(VENV, REQUIREMENTS))
    assert out["conversations"] == 128
    assert out["mismatches"] == []
    assert out["stop_is_eos"] is True


@HEAVY_CLIENTS
def test_arts_tinker_native_backend_trains_one_step_and_resumes(
    api_fleet: LocalFleet, tmp_path: Path
) -> None:
    out = _run_driver(api_fleet, tmp_path / "art")
    print("ART TinkerNativeBackend:", json.dumps(out))
    assert (out["step_before"], out["step_trained"], out["step_after"]) == (0, 1, 1)
    assert (out["name_before"], out["name_after"]) == (f"{MODEL}@0", f"{MODEL}@1")
    assert out["trajectories"] == 4
    assert len(set(out["rewards"])) > 1  # a group with advantages
    for choice in out["choices"]:
        # every sampled token with the sampler's logprob (ART's chat completions need them)
        assert choice["tokens"] == choice["logprobs"] > 0
        assert all(math.isfinite(x) and x <= 0 for x in choice["logprob_values"])
    metrics = out["metrics"]
    assert metrics["data/step_num_datums"] == 4
    assert metrics["data/step_trainer_tokens"] > 0
    assert math.isfinite(metrics["loss:sum"])  # cispo's
    run = str(out["model_id"])
    assert out["sampler_paths"] == {
        "0": f"tinker://{run}/sampler_weights/step_000000",
        "1": f"tinker://{run}/sampler_weights/step_000001",
    }
    assert out["training_paths"] == {"1": f"tinker://{run}/weights/step_000001"}
    assert sorted(out["server_checkpoints"]) == [
        "sampler_weights/step_000000",
        "sampler_weights/step_000001",
        "weights/step_000001",
    ]
    # the step raised the best rollout's likelihood (cispo, positive advantage): the
    # trained weights, scored by the training client (forward), against the sampler's before
    best, rescored = out["best"], out["best_rescored_after_step"]
    assert len(rescored) == best["logprobs"]
    assert sum(rescored) > sum(best["logprob_values"]), (rescored, best)
    after = out["after_step"]
    assert after["tokens"] == after["logprobs"] > 0
    # the restarted script resumed at step 1 from the training state, in a new run
    assert out["resumed_step"] == 1
    resumed_runs = out["resumed_run_ids"]
    assert resumed_runs[0] == run and len(resumed_runs) == 2
    assert out["resumed_sampler_path"] == f"tinker://{resumed_runs[1]}/sampler_weights/step_000001"
    # ... and its weights are the trained ones: the same seed draws the same answer
    resumed = out["resumed_after_step"]
    assert resumed["text"] == after["text"]
    for x, y in zip(resumed["logprob_values"], after["logprob_values"], strict=True):
        assert math.isclose(x, y, abs_tol=1e-3), (x, y)
