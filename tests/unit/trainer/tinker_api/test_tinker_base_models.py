"""A Tinker client's base model against the engine that samples it (tinker_api/engine.py):
a model folder is the model the engine serves, under the engine's name, or refused naming
what it serves; one context for training and sampling, the smaller of the model's and
the engine's; a sample past it refused at the request, naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from artfleet.contracts.embedded_model import ensure_embedded_cache
from artfleet.contracts.errors import InvalidArgument
from artfleet.v1 import tinker_api_pb2 as pb
from artfleet_trainer.settings import TrainerSettings
from artfleet_trainer.tinker_api.catalog import fit_sample
from artfleet_trainer.tinker_api.engine import BaseModels, canonical

VLLM_CONTEXT = 2048


def _folder(root: Path, positions: int) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"max_position_embeddings": positions}))
    return root


def _settings(tmp_path: Path) -> TrainerSettings:
    return TrainerSettings(
        art_path=str(tmp_path / "art"),
        api_token=SecretStr("t"),
        model_cache_dir=str(ensure_embedded_cache()),
    )


def _vllm_serving(name: str) -> Any:
    """The inference service's GET /v1/models: its base first, then a policy."""

    async def listing() -> dict[str, Any]:
        models = [name, "run-1@3"]
        return {"data": [{"id": m, "max_model_len": VLLM_CONTEXT} for m in models]}

    return listing


async def test_the_embedded_models_folder_is_the_model_vllm_serves(tmp_path: Path) -> None:
    copy = str(ensure_embedded_cache())  # what a client names for an offline tokenizer
    assert canonical(copy) == canonical("HuggingFaceTB/SmolLM2-135M-Instruct")
    bases = BaseModels(_settings(tmp_path), _vllm_serving("smollm2-135m-instruct"))
    base = await bases.base(copy)
    # published under the name vLLM serves (a folder's name is refused by the service)
    assert base.name == "smollm2-135m-instruct"
    assert base.context == VLLM_CONTEXT  # not SmolLM2's 8192: vLLM samples no more


async def test_a_folder_of_another_model_is_refused_naming_what_vllm_serves(
    tmp_path: Path,
) -> None:
    other = str(_folder(tmp_path / "other", 4096))
    bases = BaseModels(_settings(tmp_path), _vllm_serving("smollm2-135m-instruct"))
    with pytest.raises(InvalidArgument) as refused:
        await bases.base(other)
    assert refused.value.field == "base_model"
    assert "serves 'smollm2-135m-instruct'" in refused.value.message and other in str(refused.value)


async def test_vllm_serving_a_folder_takes_the_same_folder_by_another_path(
    tmp_path: Path,
) -> None:
    folder = _folder(tmp_path / "model", 1024)
    (tmp_path / "link").symlink_to(folder)
    bases = BaseModels(_settings(tmp_path), _vllm_serving(str(folder)))
    base = await bases.base(str(tmp_path / "link"))
    assert base.name == str(folder)
    assert base.context == 1024  # the model's, below vLLM's max_model_len


async def test_on_the_torch_server_the_context_is_the_models(tmp_path: Path) -> None:
    folder = str(_folder(tmp_path / "model", 4096))
    bases = BaseModels(_settings(tmp_path), None)
    assert (await bases.base(folder)).context == 4096
    default = await bases.base("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert default.name == "smollm2-135m-instruct" and default.context == 8192
    known = {b.name: b.context for b in await bases.known()}
    assert known["HuggingFaceTB/SmolLM2-135M-Instruct"] == 8192


def _sample(prompt: int, max_tokens: int) -> pb.SampleOp:
    op = pb.SampleOp(prompt=list(range(prompt)), num_samples=1)
    op.params.max_tokens = max_tokens
    return op


def test_a_sample_past_the_context_is_refused_naming_max_tokens() -> None:
    with pytest.raises(InvalidArgument) as refused:
        fit_sample(_sample(2000, 64), 2048)
    assert refused.value.field == "sampling_params.max_tokens"
    assert "at most 48" in refused.value.message
    assert fit_sample(_sample(2000, 48), 2048).params.max_tokens == 48
    with pytest.raises(InvalidArgument) as full:
        fit_sample(_sample(2048, 0), 2048)
    assert full.value.field == "prompt"
    # no max_tokens: the default (256), cut to the room left
    assert fit_sample(_sample(2000, 0), 2048).params.max_tokens == 48
    assert fit_sample(_sample(10, 0), 2048).params.max_tokens == 0
    assert fit_sample(_sample(5000, 64), 0).params.max_tokens == 64  # context not known
