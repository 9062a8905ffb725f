"""tinker-cookbook 0.6.1 (in a virtualenv of its own) against the fleet's Tinker-compatible
API: its own supervised training loop (`tinker_cookbook.supervised.train.main`) fine-tunes
SmolLM2 on the conversations the cookbook ships, three steps of four, with a held-out NLL
evaluation through a sampling client, a periodic checkpoint and the final one."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

from client_venvs import HEAVY_CLIENTS, client_venv
from repo_paths import SUPPORT

from artfleet_cli.fleet import LocalFleet

VENV = "tinker-cookbook-0.6.1"
# tinker-cookbook 0.6.1 declares tml-renderers>=0.4.1, which PyPI does not serve (0.2.1 is
# its newest): that package tokenizes only Thinking Machines' own models and is never
# imported for SmolLM2. So the cookbook goes in without its dependencies and the others it
# declares are listed here; torch is the CPU wheel of pip's find-links.
REQUIREMENTS = [
    "torch==2.13.0",
    "tinker==0.38.0",
    "transformers==5.23.0",
    "aiohttp>=3.9.0",
    "anyio>=4.0.0",
    "blobfile>=3.0.0",
    "chz>=0.4.0",
    "cloudpickle>=3.0.0",
    "datasets>=2.14.0",
    "huggingface-hub>=0.20.0",
    "numpy>=1.24.0",
    "pillow>=10.0.0",
    "pydantic>=2.0.0",
    "pyrage>=1.4.0",
    "rich>=13.0.0",
    "safetensors>=0.4.0",
    "termcolor>=2.0.0",
    "tiktoken>=0.12.0",
    "tqdm>=4.60.0",
]
NO_DEPS = ["tinker-cookbook==0.6.1"]
CLIENTS = SUPPORT / "tinker_clients"
DRIVER = CLIENTS / "cookbook_sft.py"
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _tokenizer_folder() -> Path:
    """SmolLM2's tokenizer files, written from the embedded model (there is no hub)."""
    from artfleet.contracts.embedded_model import ensure_embedded_cache

    return ensure_embedded_cache()


def renderer_check(python: Path) -> dict[str, Any]:
    """smollm2.py's check, run by a client's interpreter on its cookbook's conversations."""
    done = subprocess.run(
        [str(python), str(CLIENTS / "smollm2.py"), str(_tokenizer_folder())],
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _run_driver(fleet: LocalFleet, log_path: Path) -> dict[str, Any]:
    python = client_venv(VENV, REQUIREMENTS, NO_DEPS)
    env = {
        **os.environ,
        "TINKER_BASE_URL": fleet.api_url,
        "TINKER_API_KEY": f"tml-{fleet.token}",
        "TINKER_TELEMETRY": "0",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
    done = subprocess.run(
        [str(python), str(DRIVER), SMOLLM2, str(_tokenizer_folder()), str(log_path)],
        env=env,
        cwd=log_path.parent,  # the loop logs the git state of its working directory
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_drivers_copy_of_smollm2s_template_is_the_models() -> None:
    from tinker_clients.smollm2 import SMOLLM2_TEMPLATE

    from artfleet.contracts.chat_template import CHATML_TEMPLATE

    assert SMOLLM2_TEMPLATE == CHATML_TEMPLATE


@HEAVY_CLIENTS
def test_the_smollm2_renderer_renders_smollm2s_chat_template() -> None:
    """Every conversation the cookbook ships, rendered by the drivers' SmolLM2 renderer, is
    what SmolLM2's chat template (and the fleet tokenizer's) makes of it; `qwen3_instruct`
    differs wherever SmolLM2's default system message is due."""
    out = renderer_check(client_venv(VENV, REQUIREMENTS, NO_DEPS))
    assert out["conversations"] == 128
    assert out["prompts_checked"] >= 128
    assert out["mismatches"] == []
    assert out["stop_is_eos"] is True
    assert out["qwen3_instruct_prompts_differing"] == 128 - out["with_system"] > 0


@HEAVY_CLIENTS
def test_the_cookbook_supervised_loop_trains_smollm2(api_fleet: LocalFleet, tmp_path: Path) -> None:
    out = _run_driver(api_fleet, tmp_path / "sl-run")
    print("tinker-cookbook:", json.dumps(out))
    steps = out["steps"]
    assert [s["step"] for s in steps] == [0, 1, 2]
    # the loop's linear schedule from 2e-4 over its three steps
    assert [round(s["learning_rate"] * 3e4) for s in steps] == [6, 4, 2]
    for s in steps:
        assert s["num_sequences"] == 4
        # the cookbook's "mean" reduction: each conversation's weights sum to 1
        assert math.isclose(s["num_loss_tokens"], 4, rel_tol=1e-5)
        assert math.isfinite(s["train_mean_nll"]) and s["train_mean_nll"] > 0
    # the held-out NLL, scored by a sampling client of the weights before step 0
    assert math.isfinite(float(steps[0]["test_nll"])) and steps[0]["test_nll"] > 0
    model_id = str(out["model_id"])
    assert [c["name"] for c in out["checkpoints"]] == ["000002", "final"]
    for c in out["checkpoints"]:
        assert c["state_path"] == f"tinker://{model_id}/weights/{c['name']}"
        assert c["sampler_path"] == f"tinker://{model_id}/sampler_weights/{c['name']}"
    assert sorted(out["server_checkpoints"]) == [
        "sampler_weights/000002",
        "sampler_weights/final",
        "weights/000002",
        "weights/final",
    ]
    # the final sampler weights answer, every token with its logprob
    assert out["final_sample_tokens"] == out["final_sample_logprobs"] > 0
