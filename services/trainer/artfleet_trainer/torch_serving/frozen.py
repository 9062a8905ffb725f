"""Checkpoints served for evaluation: `artfleet eval run` against the
trainer's endpoint may name a policy no job is training at that step:

- `name@step` of any model under the ART path: an older checkpoint of a running job (its
  SFT checkpoint too), or one of a finished job (`name` alone or `name@latest`: its latest
  checkpoint; `name@best`: the one its job marked best, checkpoint_layout);
- a base model by the name a model here was trained from, or the embedded default's
  (`smollm2-135m-instruct`): the base weights, before any training.

Such a policy is loaded on its first request (base weights + the step's adapter, not
trainable) and kept while in use; at most `max_loaded` stay loaded (least recently asked
goes first); a name that resolves to a training model's current step gets its live
policy instead. Only names the trainer itself wrote are loaded: a model folder found by a
plain name, or a `base_model` recorded in a model's `model.json`, so a request cannot
make the trainer read an arbitrary path.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from peft import PeftModel, get_peft_model

from artfleet.contracts.base_models import MODEL_ALIASES
from artfleet.contracts.checkpoint_layout import (
    find_checkpoint,
    is_full_checkpoint,
    parse_model_name,
)
from artfleet_trainer.torch_backend import training
from artfleet_trainer.torch_backend.model_loader import LoadedModel
from artfleet_trainer.torch_backend.worker import TorchWorker

from .server import ServedPolicy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FrozenRef:
    name: str
    step: int
    base_model: str
    checkpoint: Path | None  # None: the base model itself

    @property
    def key(self) -> str:
        return f"{self.name}@{self.step}"


def _base_model_of(model_dir: Path) -> str:
    try:
        return str(json.loads((model_dir / "model.json").read_text()).get("base_model") or "")
    except (OSError, ValueError):
        return ""


def find(art_path: Path, requested: str) -> FrozenRef | None:
    """What `requested` names under `art_path`, or None."""
    name, step = parse_model_name(requested)
    found = find_checkpoint(art_path, name, step, accept=lambda d: bool(_base_model_of(d)))
    if found is not None:
        at, checkpoint = found
        return FrozenRef(name, at, _base_model_of(checkpoint.parent.parent), checkpoint)
    if step not in (None, 0):
        return None
    known_bases = {_base_model_of(d) for d in art_path.glob("*/models/*") if d.is_dir()}
    known_bases |= MODEL_ALIASES  # the embedded default: loadable before any model is
    return FrozenRef(name, 0, name, None) if name in known_bases - {""} else None


MakePolicy = Callable[[str, Any, Any, int], ServedPolicy]


class FrozenPolicies:
    """Loads, keeps and closes the evaluation-only policies of one TorchBackend."""

    def __init__(
        self,
        art_path: str,
        worker: TorchWorker,
        make_policy: MakePolicy,
        live: Mapping[str, ServedPolicy],
        *,
        loader: Callable[[str], LoadedModel],
        lora_rank: int,
        max_loaded: int = 2,
    ) -> None:
        """`loader`: a base model by name, in the backend's dtype and on its device."""
        self._art_path = Path(art_path)
        self._worker = worker
        self._make_policy = make_policy
        self._live = live  # the models in training, by name
        self._loader = loader
        self._lora_rank = lora_rank
        self._max_loaded = max_loaded
        self._loaded: OrderedDict[str, ServedPolicy] = OrderedDict()
        self._lock = asyncio.Lock()  # one load at a time: each holds a whole model

    async def get(self, requested: str) -> ServedPolicy | None:
        ref = await asyncio.to_thread(find, self._art_path, requested)
        if ref is None:
            return None
        live = self._live.get(ref.name)
        if live is not None and live.step == ref.step:
            return live
        async with self._lock:
            policy = self._loaded.get(ref.key)
            if policy is None:
                policy = await self._worker.run(self._load, ref)
                self._loaded[ref.key] = policy
                await self._evict()
            self._loaded.move_to_end(ref.key)
            return policy

    def _load(self, ref: FrozenRef) -> ServedPolicy:
        """Torch thread. The base model gets a fresh LoRA adapter: its B matrices start at
        zero, so it answers exactly as the base weights do, through the same engine. A full
        fine-tune's checkpoint is served as the model it is."""
        model: Any
        if ref.checkpoint is not None and is_full_checkpoint(ref.checkpoint):
            # a full fine-tune's checkpoint is a whole model folder: loaded as a base is
            loaded = self._loader(str(ref.checkpoint))
            model = loaded.model
        elif ref.checkpoint is None:
            loaded = self._loader(ref.base_model)
            model = get_peft_model(loaded.model, training.lora_config(self._lora_rank))
        else:
            loaded = self._loader(ref.base_model)
            model = PeftModel.from_pretrained(loaded.model, str(ref.checkpoint))
        model.eval()
        log.info("serving %s for evaluation (%.1fs to load)", ref.key, loaded.load_seconds)
        return self._make_policy(ref.name, model, loaded.tokenizer, ref.step)

    async def _evict(self) -> None:
        while len(self._loaded) > self._max_loaded:
            key, policy = self._loaded.popitem(last=False)
            log.info("no longer serving %s (least recently asked)", key)
            await policy.scheduler.close()

    async def close(self) -> None:
        for policy in self._loaded.values():
            await policy.scheduler.close()
        self._loaded.clear()
