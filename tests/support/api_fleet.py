"""A local fleet for the API tests and bench/api_fuzz_bench.py: torch backend with a tiny
random Llama wearing SmolLM2's tokenizer (a step takes seconds on two cores), the local
(bubblewrap) sandbox, and the HTTP training API's hosted model names mapped onto this fleet
(the trainer's `ARTFLEET_BASE_MODEL_MAP`, the API's `ARTFLEET_JUDGE_MODEL_MAP`: `gpt-4o` =
the job's own policy)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from repo_paths import FIXTURES

from artfleet.specs.job import DEFAULT_BASE_MODEL
from artfleet_cli.fleet import LocalFleet

EXAMPLES_BASE_MODEL = "Qwen/Qwen2.5-7B-Instruct"  # what the HTTP training API's examples name
TRAJECTORIES = FIXTURES / "trajectories"


def tiny_model(folder: Path, tie_word_embeddings: bool = False) -> Path:
    """Saved to `folder` with SmolLM2's tokenizer; `tie_word_embeddings`: the head shares
    the embeddings' weight, as SmolLM2's does."""
    from tiny_llama import tiny_llama
    from transformers import AutoTokenizer

    from artfleet.contracts.embedded_model import ensure_embedded_cache

    tokenizer = AutoTokenizer.from_pretrained(ensure_embedded_cache())
    model = tiny_llama(
        len(tokenizer),
        eos_token_id=tokenizer.eos_token_id,
        max_position_embeddings=8192,
        tie_word_embeddings=tie_word_embeddings,
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def api_fleet(work: Path) -> LocalFleet:
    """Not started yet; sampled-trajectory fixtures copied to its trajectories directory."""
    model = tiny_model(work / "tiny-model")
    trajectories = work / "trajectories"
    shutil.copytree(TRAJECTORIES, trajectories)
    return LocalFleet(
        work / "fleet",
        extra_env={
            "ARTFLEET_SANDBOX_BACKEND": "local",
            # The default too: a fuzzed job spec never loads the real model.
            "ARTFLEET_BASE_MODEL_MAP": json.dumps(
                {EXAMPLES_BASE_MODEL: str(model), DEFAULT_BASE_MODEL: str(model)}
            ),
            "ARTFLEET_JUDGE_MODEL_MAP": json.dumps({"gpt-4o": "policy"}),
            "ARTFLEET_TRAJECTORIES_DIR": str(trajectories),
        },
    )
