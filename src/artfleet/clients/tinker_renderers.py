"""SmolLM2's chat format for tinker-cookbook, shipped for the clients of the fleet's
Tinker-compatible API (docs/tinker.md). Importing this module registers the renderer
`artfleet/smollm2` with the cookbook's registry when the cookbook is installed; without
it the import does nothing (the cookbook stays an optional dependency, imported only
here). It needs nothing else of artfleet: `pip install --no-deps` it into a client's own
environment.

    import artfleet.clients.tinker_renderers  # registers artfleet/smollm2
    renderer = renderers.get_renderer("artfleet/smollm2", tokenizer)

SmolLM2 speaks ChatML (`<|im_start|>role\\n...<|im_end|>\\n`), which the cookbook's
`qwen3_instruct` renders token for token, but SmolLM2's template also opens every
conversation without a system message with its default one ("You are a helpful AI
assistant named SmolLM, trained by Hugging Face"), as the fleet's tokenizer does for
jobs and chat completions. `qwen3_instruct` adds none, so SmolLM2 would be trained and
sampled on prompts it never sees elsewhere. `artfleet/smollm2` is `qwen3_instruct` plus
that default system message (as the cookbook's Kimi K2 renderer adds Kimi's). It stops at
`<|im_end|>`, SmolLM2's end of turn.

The cookbook loads a tokenizer by the model's hub name; offline, `register(folder)` also
maps that name to a local tokenizer folder (the fleet's embedded copy has one).
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
RENDERER = "artfleet/smollm2"
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def cookbook_installed() -> bool:
    return importlib.util.find_spec("tinker_cookbook") is not None


def register(tokenizer_folder: str | None = None, model_name: str = SMOLLM2) -> bool:
    """Register `artfleet/smollm2` with the cookbook's `get_renderer` and, given a
    `tokenizer_folder`, make its `get_tokenizer(model_name)` read that folder. False
    (nothing registered) when the cookbook is not installed."""
    if not cookbook_installed():
        return False
    from tinker_cookbook import renderers, tokenizer_utils

    renderers.register_renderer(RENDERER, lambda tok, _images=None: _renderer_class()(tok))
    if tokenizer_folder is not None:
        folder = tokenizer_folder

        @functools.cache
        def tokenizer() -> Any:
            from transformers import AutoTokenizer

            return AutoTokenizer.from_pretrained(folder)

        tokenizer_utils.register_tokenizer(model_name, tokenizer)
    return True


@functools.cache
def _renderer_class() -> type:
    from tinker_cookbook.renderers.qwen3 import Qwen3InstructRenderer

    class SmolLM2Renderer(Qwen3InstructRenderer):
        """ChatML, with SmolLM2's default system message when a conversation has none."""

        def _with_system(self, messages: list[Any]) -> list[Any]:
            if messages and messages[0]["role"] == "system":
                return messages
            return [{"role": "system", "content": DEFAULT_SYSTEM}, *messages]

        def build_generation_prompt(self, messages: list[Any], *args: Any, **kw: Any) -> Any:
            return super().build_generation_prompt(self._with_system(messages), *args, **kw)

        def build_supervised_example(self, messages: list[Any], *args: Any, **kw: Any) -> Any:
            return super().build_supervised_example(self._with_system(messages), *args, **kw)

    return SmolLM2Renderer


register()  # the renderer, on import, when the cookbook is there
