"""The torch backend's built-in server on a tiny random Llama, for tests that talk HTTP to it
(exact token ids, tool calls, chat template variables)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from tiny_llama import tiny_llama
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from artfleet_trainer.torch_backend.worker import TorchWorker
from artfleet_trainer.torch_serving.generation import BatchEngine
from artfleet_trainer.torch_serving.scheduler import GenerationScheduler
from artfleet_trainer.torch_serving.server import InferenceServer, ServedPolicy


def word_tokenizer(vocab: int, template: str) -> PreTrainedTokenizerFast:
    """Word-level: `w<ii>` is token i (two digits: no token prefixes another); w00 unknown,
    w01 pad, w02 end of sequence."""
    backend = Tokenizer(models.WordLevel({f"w{i:02d}": i for i in range(vocab)}, unk_token="w00"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="w02", pad_token="w01")
    tok.chat_template = template
    return tok


@asynccontextmanager
async def serve_tiny(
    tokenizer: PreTrainedTokenizerFast,
    *,
    vocab: int,
    eos: int,
    key: str,
    context: int = 128,
    step: int = 1,
) -> AsyncIterator[int]:
    """One policy, `agent` (served as `agent@<step>`), on a tiny Llama of `vocab` ids with
    `context` positions; yields the server's port."""
    model = tiny_llama(vocab, eos, max_position_embeddings=max(context, 256))
    worker = TorchWorker(num_threads=1)
    # The engine serves the policy's step, as the backend builds them: answers name it.
    engine = BatchEngine(
        model, tokenizer, stop_token_ids=frozenset({eos}), max_context=context, step=step
    )
    scheduler = GenerationScheduler(engine, asyncio.Lock(), worker)
    policy = ServedPolicy("agent", tokenizer, scheduler, max_context=context, step=step)
    server = InferenceServer({"agent": policy}, api_key=key)
    port = await server.start()
    try:
        yield port
    finally:
        await server.stop()
        await scheduler.close()
        worker.shutdown()
