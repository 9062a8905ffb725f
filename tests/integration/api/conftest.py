"""One real fleet for the API tests (session-wide: the fleet tests, the schema fuzzing and
the console tests share it): redis-server, the four gRPC services, a Celery worker, the
local (bubblewrap) sandbox and the API process, on the torch backend with a tiny random
Llama that wears SmolLM2's tokenizer, so a step takes seconds on two cores.

Seed 002 names hosted models; the API maps them onto what this fleet has, as a deployment
would (`ARTFLEET_BASE_MODEL_MAP`, `ARTFLEET_JUDGE_MODEL_MAP`): its base model onto the tiny
model, and `gpt-4o` onto the job's own policy as a local judge."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from artfleet.cli.fleet import LocalFleet
from artfleet.jobspec import DEFAULT_BASE_MODEL

SEED_BASE_MODEL = "Qwen/Qwen2.5-7B-Instruct"
FIXTURES = Path(__file__).parents[2] / "fixtures" / "trajectories"


def _tiny_model(folder: Path) -> Path:
    from tiny_llama import tiny_llama
    from transformers import AutoTokenizer

    from artfleet_trainer.torch_backend.model_loader import ensure_embedded_cache

    tokenizer = AutoTokenizer.from_pretrained(ensure_embedded_cache())
    model = tiny_llama(
        len(tokenizer), eos_token_id=tokenizer.eos_token_id, max_position_embeddings=8192
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def api_fleet(
    tmp_path_factory: pytest.TempPathFactory, require_infra: Callable[[bool, str], None]
) -> Iterator[LocalFleet]:
    require_infra(shutil.which("bwrap") is not None, "bubblewrap (bwrap) is not installed")
    work = tmp_path_factory.mktemp("api-fleet")
    model = _tiny_model(work / "tiny-model")
    trajectories = work / "trajectories"
    shutil.copytree(FIXTURES, trajectories)
    fleet = LocalFleet(
        work / "fleet",
        extra_env={
            "ARTFLEET_SANDBOX_BACKEND": "local",
            # The default too: a fuzzed job spec never loads the real model.
            "ARTFLEET_BASE_MODEL_MAP": json.dumps(
                {SEED_BASE_MODEL: str(model), DEFAULT_BASE_MODEL: str(model)}
            ),
            "ARTFLEET_JUDGE_MODEL_MAP": json.dumps({"gpt-4o": "policy"}),
            "ARTFLEET_TRAJECTORIES_DIR": str(trajectories),
        },
    )
    fleet.start()
    try:
        yield fleet
    finally:
        codes = fleet.stop()
        assert all(code is not None and code >= 0 for code in codes.values()), codes


@pytest.fixture(scope="session")
def tiny_model_path(api_fleet: LocalFleet) -> str:
    return str(api_fleet.workdir.parent / "tiny-model")


@pytest.fixture
def api(api_fleet: LocalFleet) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {api_fleet.token}"}
    with httpx.Client(base_url=api_fleet.api_url, headers=headers, timeout=600) as client:
        yield client
