"""A Tinker client's base model against the engine that samples it: the name the trainer
loads (and the engine serves) for the name a client gives, and the one context that
training and sampling both take.

A client may name its base as the hub id, the embedded default's name, or a model folder
(the embedded default's own copy among them, for an offline tokenizer). The trainer's
torch server samples whatever the trainer loads. The inference service's vLLM serves one
base model under one name: a client's base must be that model, named as the service names
it (publishing a checkpoint of another name is refused), so a folder that is the served
model is mapped onto the served name at `create_model`, and a folder that is not is
refused there, naming what the engine serves. The context is the base model's
`max_position_embeddings`, and on vLLM no more than its `max_model_len`: a datum longer
than that could be trained but never sampled, so training refuses it too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from artfleet.contracts import base_models as names
from artfleet.contracts.embedded_model import COMPLETE_MARKER, ensure_embedded_cache
from artfleet.contracts.errors import InvalidArgument
from artfleet.contracts.model_listing import listed_base_model, listed_max_model_len
from artfleet_trainer.clients.inference_client import InferenceRefused, InferenceUnavailable
from artfleet_trainer.jobs.context_limit import model_context
from artfleet_trainer.settings import TrainerSettings

log = logging.getLogger(__name__)

# The inference service's GET /v1/models (None: the trainer's own torch server samples).
Listing = Callable[[], Awaitable[dict[str, Any]]]
LISTING_TTL_S = 30.0  # vLLM's base and context are fixed for its process's life
SERVED_MODEL_SETTING = "ARTFLEET_INFERENCE_MODEL"


@dataclass(frozen=True)
class Base:
    name: str  # what the trainer loads and the engine serves
    context: int  # the most tokens of a datum, or of a prompt and its sample (0: unknown)


def canonical(base_model: str) -> str:
    """One spelling per model: the embedded default by any of its names or as its cached
    copy (the folder holding the copy's completion marker), a folder by its real path."""
    if names.is_embedded_default(base_model):
        return names.DEFAULT_MODEL_NAME
    folder = names.model_folder(base_model)
    if folder is None:  # not on this machine (a folder of the engine's): as it is named
        return base_model
    if (folder / COMPLETE_MARKER).is_file():
        return names.DEFAULT_MODEL_NAME
    return str(folder.resolve())


def served_base(requested: str, served: str) -> str:
    """The engine's name for `requested` when it serves that model; InvalidArgument naming
    `base_model` and what it serves otherwise."""
    if canonical(requested) == canonical(served):
        return served
    raise InvalidArgument(
        f"the serving engine (the inference service's vLLM) serves {served!r}, not "
        f"{requested!r}: a client of another base model could never sample. Name "
        f"{served!r} (or a folder of that model), or serve the other model "
        f"({SERVED_MODEL_SETTING} of the inference service)",
        "base_model",
    )


class BaseModels:
    def __init__(self, settings: TrainerSettings, listing: Listing | None) -> None:
        """`listing`: the inference service's model listing when its vLLM samples."""
        self._settings = settings
        self._listing = listing
        self._listed: tuple[float, dict[str, Any]] | None = None
        self._cache = Path(settings.model_cache_dir or names.DEFAULT_CACHE_DIR).expanduser()

    async def base(self, requested: str) -> Base:
        """The base a client naming `requested` trains and samples; InvalidArgument naming
        `base_model` when the trainer cannot load it or the engine serves another."""
        resolved = names.resolve(requested, self._settings.base_model_map)
        names.check_base_model(resolved, self._settings.art_path, self._settings.base_model_map)
        # One base in memory for every spelling of the embedded default.
        default = canonical(resolved) == names.DEFAULT_MODEL_NAME
        loaded = names.DEFAULT_MODEL_NAME if default else resolved
        context = await self._model_context(loaded)
        listed = await self._served()
        if listed is None:
            return Base(loaded, context)
        served = listed_base_model(listed)
        if served is None:
            return Base(loaded, context)
        engine_context = listed_max_model_len(listed)
        if engine_context is not None:
            context = min(context, engine_context) if context else engine_context
        return Base(served_base(resolved, served), context)

    async def known(self) -> list[Base]:
        """The bases a client may name (`get_server_capabilities`), each with its context:
        on vLLM only the model it serves, by each of its names the trainer knows."""
        found = []
        known = names.known_base_models(self._settings.art_path, self._settings.base_model_map)
        listed = await self._served()
        served = listed_base_model(listed) if listed is not None else None
        if served is not None and served not in known:
            known.append(served)
        for name in known:
            try:
                base = await self.base(name)
            except InvalidArgument:
                continue
            found.append(Base(name, base.context))
        return found

    async def _model_context(self, loaded: str) -> int:
        """The model's max_position_embeddings (the embedded default's copy written first,
        as loading it would)."""
        cache = None
        if loaded == names.DEFAULT_MODEL_NAME:
            cache = await asyncio.to_thread(ensure_embedded_cache, self._cache)
        found = await asyncio.to_thread(model_context, loaded, cache)
        return found.tokens if found is not None else 0

    async def _served(self) -> dict[str, Any] | None:
        """The engine's listing (cached a while); None on the torch server, or when the
        inference service does not answer (the model's own context then; a checkpoint of
        another base is refused when it is published)."""
        if self._listing is None:
            return None
        now = time.monotonic()
        if self._listed is not None and now - self._listed[0] < LISTING_TTL_S:
            return self._listed[1]
        try:
            listed = await self._listing()
        except (InferenceUnavailable, InferenceRefused) as exc:
            log.warning("the inference service's models not listed: %s", exc)
            return None
        self._listed = (now, listed)
        return listed
