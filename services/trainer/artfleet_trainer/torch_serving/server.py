"""The built-in OpenAI-compatible server (aiohttp) that rollout workers call.

It runs on the backend's event loop: `GET /v1/models`, `POST /v1/chat/completions` and
`POST /v1/completions` (vLLM's text completions, a prompt of token ids for the HTTP
training API's sampler: completions.py), no streaming, every route behind
`Authorization: Bearer <api_key>`. Errors are OpenAI-style JSON bodies, never tracebacks.
The policy is addressed as `name@step` (or plain `name`, meaning the current step;
`name@best`, the step its job marked best). A model in training answers from its live
weights at its current step; any other saved step (older ones, finished jobs', base
models) from a copy loaded on request (frozen.py).

Structured output (`response_format` json_schema/json_object, or vLLM's
`structured_outputs`) is constrained decoding with xgrammar (grammar.py), so a judge
such as ART's RULER can run on the policy itself.

Tools (`tools`, `tool_choice`, `parallel_tool_calls`) are rendered by the model's chat
template and the output is parsed into OpenAI `tool_calls` as vLLM's `hermes` parser does
(tool_calls.py); `required` and a named function are constrained to valid calls.

`return_token_ids: true` (vLLM's extension) adds the exact ids: the prompt the model saw
(`prompt_token_ids`) and each choice's sampled ids (`token_ids`). `chat_template_kwargs`
(vLLM's too) passes variables to the chat template, e.g. Qwen3's `enable_thinking`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from aiohttp import web
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from artfleet.contracts.checkpoint_layout import (
    BEST,
    ModelRefError,
    describe_missing,
    is_latest,
    parse_model_name,
)
from artfleet.runtime.auth import bearer_matches, openai_error

from .completions import (
    CompletionRequest,
    check_prompt_ids,
    parse_completion_request,
    text_completion,
)
from .generation import GenerationRequest, SequenceOutput
from .grammar import GrammarCompiler, GrammarError
from .metrics import GENERATED_TOKENS, GENERATION_REQUESTS, GENERATION_SECONDS
from .protocol import (
    ChatRequest,
    RequestError,
    bad_request,
    chat_completion,
    model_list,
    model_not_found,
    parse_chat_request,
)
from .scheduler import GenerationScheduler, SchedulerClosed

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MAX_BODY_BYTES = 32 * 1024 * 1024  # long agent histories with tool outputs


@dataclass(eq=False)
class ServedPolicy:
    """One trainable model as the server sees it; the backend bumps `step` after training."""

    name: str
    tokenizer: PreTrainedTokenizerBase
    scheduler: GenerationScheduler
    max_context: int
    step: int = 0
    token_text: Callable[[int], str] = field(init=False)
    _grammars: GrammarCompiler | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        decode = self.tokenizer.decode
        self.token_text = functools.lru_cache(maxsize=1 << 16)(lambda i: str(decode([i])))

    @property
    def grammars(self) -> GrammarCompiler:
        """Built on first use: reading the vocabulary costs a second, free requests never pay."""
        if self._grammars is None:
            engine = self.scheduler.engine
            self._grammars = GrammarCompiler(self.tokenizer, self.vocab_size, engine.stop_token_ids)
        return self._grammars

    @property
    def vocab_size(self) -> int:
        """The model's embedding rows (may be more than the tokenizer's ids)."""
        return int(self.scheduler.engine.model.config.vocab_size)

    @property
    def served_name(self) -> str:
        return f"{self.name}@{self.step}"


# A policy the server does not hold, by its requested name (checkpoints and base models
# served for evaluation, frozen.py); None: there is none.
Loader = Callable[[str], Awaitable["ServedPolicy | None"]]


class InferenceServer:
    def __init__(
        self,
        policies: Mapping[str, ServedPolicy],
        *,
        api_key: str,
        host: str = "127.0.0.1",
        port: int = 0,
        default_max_tokens: int = 512,
        loader: Loader | None = None,
    ) -> None:
        if not api_key:
            raise ValueError("the inference server needs an API key")
        self._policies = policies
        self._loader = loader
        self._api_key = api_key
        self.host = host
        self._requested_port = port
        self.default_max_tokens = default_max_tokens
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        self.started_at = int(time.time())

    @property
    def running(self) -> bool:
        return self._runner is not None

    def make_app(self) -> web.Application:
        app = web.Application(
            middlewares=[self._errors, self._auth], client_max_size=MAX_BODY_BYTES
        )
        app.router.add_get("/v1/models", self._list_models)
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_post("/v1/completions", self._completions)
        return app

    async def start(self) -> int:
        """Listen (port 0 picks a free one) and return the port."""
        if self._runner is not None and self.port is not None:
            return self.port
        runner = web.AppRunner(self.make_app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._requested_port)
        await site.start()
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        log.info("torch backend inference server on %s:%s", self.host, self.port)
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self._runner = None

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except RequestError as exc:
            return web.json_response(exc.body(), status=exc.status)
        except web.HTTPException as exc:  # unknown route, wrong method, ...
            code = "not_found" if exc.status == 404 else None
            allow = {k: v for k, v in exc.headers.items() if k.lower() == "allow"}
            return web.json_response(
                openai_error(exc.reason, code=code), status=exc.status, headers=allow
            )
        except SchedulerClosed as exc:
            return web.json_response(openai_error(str(exc), type="server_error"), status=503)
        except Exception:
            log.exception("unexpected error serving %s %s", request.method, request.path)
            body = openai_error("internal server error", type="server_error")
            return web.json_response(body, status=500)

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not bearer_matches(request.headers.get("Authorization"), self._api_key):
            raise RequestError(401, "Incorrect API key provided.", code="invalid_api_key")
        return await handler(request)

    async def _list_models(self, request: web.Request) -> web.Response:
        names = [policy.served_name for policy in self._policies.values()]
        return web.json_response(model_list(names, self.started_at))

    async def _chat_completions(self, request: web.Request) -> web.Response:
        return await self._answer(request, self._chat_completion_body)

    async def _completions(self, request: web.Request) -> web.Response:
        return await self._answer(request, self._completion_body)

    async def _answer(
        self, request: web.Request, make_body: Callable[[web.Request], Awaitable[dict[str, Any]]]
    ) -> web.Response:
        """Answer a generation route with its body, counted in the same metrics."""
        started = time.monotonic()
        try:
            body = await make_body(request)
        except RequestError as exc:
            GENERATION_REQUESTS.labels(status=str(exc.status)).inc()
            raise
        except Exception:
            GENERATION_REQUESTS.labels(status="500").inc()
            raise
        GENERATION_REQUESTS.labels(status="200").inc()
        GENERATION_SECONDS.observe(time.monotonic() - started)
        return web.json_response(body)

    async def _chat_completion_body(self, request: web.Request) -> dict[str, Any]:
        chat = parse_chat_request(
            await _read_json(request), default_max_tokens=self.default_max_tokens
        )
        policy = await self._resolve(chat.model)
        prompt = _prompt_ids(policy, chat)
        grammar = await _grammar(policy, chat)
        generation = GenerationRequest(prompt, chat.params, grammar=grammar)
        outputs, served_name = await _generate(policy, generation)
        return chat_completion(
            model=served_name,
            outputs=outputs,
            prompt_tokens=len(prompt),
            logprobs=chat.logprobs,
            token_text=policy.token_text,
            prompt_token_ids=prompt if chat.return_token_ids else None,
            parse_tools=chat.tool_choice.mode != "none",
        )

    async def _completion_body(self, request: web.Request) -> dict[str, Any]:
        completion = parse_completion_request(
            await _read_json(request), default_max_tokens=self.default_max_tokens
        )
        policy = await self._resolve(completion.model)
        prompt = _completion_prompt(policy, completion)
        generation = GenerationRequest(prompt, completion.params)
        outputs, served_name = await _generate(policy, generation)
        return text_completion(
            model=served_name,
            outputs=outputs,
            prompt_ids=prompt,
            request=completion,
            token_text=policy.token_text,
            prompt_logprobs=generation.prompt_logprobs,
        )

    async def _resolve(self, requested: str) -> ServedPolicy:
        try:
            name, step = parse_model_name(requested)
        except ModelRefError as exc:
            raise bad_request(str(exc), "model") from None
        policy = self._policies.get(name)
        if policy is not None and (is_latest(step) or step == policy.step):
            return policy  # training here: its live weights
        # Any other saved step, trained here or not (the loader returns the live policy
        # when `best` names its current step).
        loaded = await self._loader(requested) if self._loader is not None else None
        if loaded is None:
            raise model_not_found(requested, describe_missing(name, step) if step == BEST else "")
        return loaded


async def _read_json(request: web.Request) -> Any:
    try:
        return await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise bad_request(f"request body is not valid JSON: {exc}") from exc


async def _grammar(policy: ServedPolicy, chat: ChatRequest) -> Any:
    """The request's decoding constraint: its structured output, or for `tool_choice`
    required/named the tool-call format with the tools' argument schemas; else None."""
    try:  # compiling a new schema can take a while: off the event loop
        if chat.response_format is not None:
            return await asyncio.to_thread(policy.grammars.compile, chat.response_format)
        if chat.tool_choice.constrained:
            return await asyncio.to_thread(
                policy.grammars.compile_tool_calls, chat.tool_specs, chat.tool_choice
            )
    except GrammarError as exc:
        raise bad_request(str(exc), exc.param) from exc
    return None


def _prompt_ids(policy: ServedPolicy, chat: ChatRequest) -> list[int]:
    try:
        ids = policy.tokenizer.apply_chat_template(
            chat.messages,
            tools=chat.tools,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
            **chat.chat_template_kwargs,  # template variables (enable_thinking), as vLLM
        )
    except Exception as exc:  # a template that rejects these messages: the caller's problem
        raise bad_request(f"cannot apply the chat template to these messages: {exc}") from exc
    prompt = [int(i) for i in cast(list[int], ids)]
    _check_context(policy, prompt, "messages")
    return prompt


def _completion_prompt(policy: ServedPolicy, completion: CompletionRequest) -> list[int]:
    """The ids a text completion continues: given, or the string's (with the tokenizer's
    special tokens, BOS, unless `add_special_tokens` is false, as vLLM)."""
    if isinstance(completion.prompt, str):
        ids = policy.tokenizer.encode(
            completion.prompt, add_special_tokens=completion.add_special_tokens
        )
        prompt = [int(i) for i in ids]
    else:
        prompt = completion.prompt
        check_prompt_ids(prompt, policy.vocab_size)
    if not prompt:
        raise bad_request("'prompt' has no tokens", "prompt")
    _check_context(policy, prompt, "prompt")
    return prompt


def _check_context(policy: ServedPolicy, prompt: list[int], param: str) -> None:
    if len(prompt) >= policy.max_context:
        raise RequestError(
            400,
            f"the prompt has {len(prompt)} tokens; this model's context is "
            f"{policy.max_context} tokens",
            code="context_length_exceeded",
            param=param,
        )


async def _generate(
    policy: ServedPolicy, generation: GenerationRequest
) -> tuple[list[SequenceOutput], str]:
    """The request's choices, and the name of the policy step that generated them."""
    outputs = await policy.scheduler.generate(generation)
    served_name = policy.served_name
    if generation.served_step is not None:  # the step that answered (asynchronous jobs)
        served_name = f"{policy.name}@{generation.served_step}"
    GENERATED_TOKENS.inc(sum(len(out.token_ids) for out in outputs))
    return outputs, served_name
