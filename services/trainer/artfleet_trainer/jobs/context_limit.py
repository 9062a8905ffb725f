"""A job's context budget against the engine that serves its policy, checked at submit.

An episode may grow to `max_context_tokens`; an engine that takes fewer answers the longer
prompts with a 400 mid-job (vLLM's `--max-model-len`). What takes the policy's prompts:
the inference service's vLLM (its `max_model_len`, which GET /v1/models lists), the
trainer's own torch server (the base model's `max_position_embeddings`, as its
`ServedPolicy.max_context`), or with `backend: art` ART's vLLM (the job's
`max_seq_length`). An inference service that does not answer is not a reason to refuse:
it may be starting, so the job is accepted and the skipped check logged.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from artfleet.clients.replicas import split_urls
from artfleet.contracts.base_models import (
    DEFAULT_CACHE_DIR,
    MODEL_CONFIG,
    is_embedded_default,
    model_folder,
)
from artfleet.contracts.errors import InvalidArgument
from artfleet.specs.job import JobSpecModel
from artfleet_trainer.clients.inference_client import (
    InferenceClient,
    InferenceRefused,
    InferenceUnavailable,
)
from artfleet_trainer.settings import TrainerSettings

log = logging.getLogger(__name__)

FIELD = "max_context_tokens"
# ART 0.5.18's InitArgs.max_seq_length when a job sets none (art/dev/get_model_config.py).
ART_DEFAULT_MAX_SEQ_LENGTH = 32_768
# The torch server's context when a model config names none (TorchBackend._make_policy).
TORCH_DEFAULT_CONTEXT = 4096


@dataclass(frozen=True)
class EngineContext:
    """The most tokens (prompt and answer) the serving engine takes, and what sets it."""

    tokens: int
    source: str


def check_context(max_context_tokens: int, engine: EngineContext | None) -> None:
    """Raises InvalidArgument naming `max_context_tokens` and both numbers when the job's
    budget exceeds the engine's context; None (not known) passes."""
    if engine is None or max_context_tokens <= engine.tokens:
        return
    raise InvalidArgument(
        f"{max_context_tokens} exceeds {engine.source} ({engine.tokens}): episodes would "
        f"outgrow what the engine accepts; use at most {engine.tokens}",
        FIELD,
    )


def art_context(spec: JobSpecModel) -> EngineContext:
    """ART's vLLM and Unsloth take the job's max_seq_length (ART's default when unset)."""
    if spec.max_seq_length is not None:
        return EngineContext(spec.max_seq_length, "the job's max_seq_length (the art backend)")
    return EngineContext(
        ART_DEFAULT_MAX_SEQ_LENGTH, "ART's default max_seq_length (set max_seq_length)"
    )


def model_context(base_model: str, embedded_cache: Path | None) -> EngineContext | None:
    """The torch server's context for `base_model` (a folder, or the embedded default's
    cached copy): its config's max_position_embeddings; None before the copy exists."""
    folder = model_folder(base_model)
    if folder is None and is_embedded_default(base_model) and embedded_cache is not None:
        folder = model_folder(str(embedded_cache))
    if folder is None:
        return None
    try:
        config = json.loads((folder / MODEL_CONFIG).read_text())
    except (OSError, ValueError):
        return None  # the loader reports a broken folder; not this check's to judge
    positions = config.get("max_position_embeddings") if isinstance(config, dict) else None
    tokens = positions if type(positions) is int and positions > 0 else TORCH_DEFAULT_CONTEXT
    return EngineContext(tokens, f"{base_model}'s max_position_embeddings (the torch server)")


class ContextLimits:
    """What serves a job's policy on this trainer, and the context it takes."""

    def __init__(
        self, *, inference: InferenceClient | None = None, embedded_cache: Path | None = None
    ) -> None:
        # `inference`: the torch backend's policies are served by the inference service.
        self._inference = inference
        self._embedded_cache = embedded_cache

    @classmethod
    def for_settings(cls, settings: TrainerSettings) -> ContextLimits:
        inference = None
        if settings.backend == "torch" and settings.inference_engine == "vllm":
            token = settings.api_token.get_secret_value()
            # every replica serves the one base model with one context: any one answers
            url = split_urls(settings.inference_url)[0]
            inference = InferenceClient(url, token)
        cache = Path(settings.model_cache_dir).expanduser() if settings.model_cache_dir else None
        return cls(inference=inference, embedded_cache=cache or DEFAULT_CACHE_DIR.expanduser())

    async def check(self, spec: JobSpecModel) -> None:
        check_context(spec.max_context_tokens, await self.engine_context(spec))

    async def engine_context(self, spec: JobSpecModel) -> EngineContext | None:
        if spec.backend == "art":
            return art_context(spec)
        if self._inference is not None:
            return await self._served_context(self._inference)
        return await asyncio.to_thread(model_context, spec.base_model, self._embedded_cache)

    @staticmethod
    async def _served_context(inference: InferenceClient) -> EngineContext | None:
        try:
            tokens = await inference.max_model_len()
        except (InferenceUnavailable, InferenceRefused) as exc:
            log.warning("%s not checked against the inference service's context: %s", FIELD, exc)
            return None
        if tokens is None:
            log.warning("%s not checked: %s lists no max_model_len", FIELD, inference.url)
            return None
        return EngineContext(tokens, "the inference service's max_model_len (vLLM)")
