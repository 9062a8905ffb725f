"""LLM-judged scorers: `ruler` (ART's RULER over the group) and `judge` (absolute score).

The judge is any OpenAI-compatible endpoint, called through litellm as ART does
(`openai/<model>` with `api_base`): `{"judge": {"base_url", "model", "api_key_env"}}`, or
`{"judge": "policy"}` for the job's own policy endpoint (the trainer puts it in the spec
each step; its key is the fleet token). Keys are read from this service's environment by
variable name; they are never in a spec, a log line or an error message.

`bounded_output` (the default for the policy judge) sends a stricter JSON schema than
ART's: exactly one score per trajectory, short explanations, scores in [0, 1]. A small
local judge (SmolLM2-135M) otherwise writes explanations that never end. ART's ruler
always sends its own `response_format`, so the bounded schema goes as vLLM's
`structured_outputs` extension (the built-in server and vLLM honour it) and litellm is
told to drop ART's. ART still parses the answer with its own model.

Both scorers fit their prompt into the judge's context (`judge_context`): a group that
would not fit is sent with its long texts cut, not refused by the judge.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar, cast

import litellm
import pydantic
from pydantic import BaseModel, Field

from artfleet.contracts import codec
from artfleet.contracts.art_types import RULER_DEFAULT_RUBRIC, art
from artfleet.specs.base import InvalidSpec
from artfleet.specs.scorer_params import (
    JUDGE,
    RULER,
    JudgeEndpoint,
    JudgeParams,
    LLMParams,
    RulerParams,
)

from .base import (
    ERROR,
    INVALID_OUTPUT,
    TIMEOUT,
    UNAVAILABLE,
    GroupContext,
    Result,
    Scored,
    Scorer,
    ScorerError,
    builtin,
)
from .judge_context import MIN_CAP, Budget, Lists, fit, refusal, ruler_chars
from .tokens import tracking_metadata

_EXPLANATION_CHARS = 160
# Tokens of JSON around each bounded score ({"trajectory_id": "1", "explanation": "",
# "score": 0.25}) and around the whole answer; text runs ~2+ characters per token.
_ITEM_TOKENS, _BASE_TOKENS, _CHARS_PER_TOKEN = 24, 8, 2
# RULER's own instructions around the rubric and the trajectories (ART's judge prompt).
_RULER_INSTRUCTION_CHARS = 400
T = TypeVar("T")


def explanation_chars(max_tokens: int, items: int) -> int:
    """How long explanations may be so that `items` bounded scores fit in `max_tokens`:
    a truncated answer is no answer."""
    per_item = (max_tokens - _BASE_TOKENS) // max(1, items) - _ITEM_TOKENS
    return max(4, min(_EXPLANATION_CHARS, per_item * _CHARS_PER_TOKEN))


@dataclass(frozen=True)
class LLMOptions:
    """A judge scorer's validated params, with the defaults that are not ours (ART's
    rubric) filled in."""

    judge: JudgeEndpoint | None  # None: the job's policy endpoint
    rubric: str
    max_tokens: int
    temperature: float
    timeout_s: float | None
    bounded: bool


def _options(params: LLMParams, field: str, rubric: str) -> LLMOptions:
    judge = params.judge if isinstance(params.judge, JudgeEndpoint) else None  # None: policy
    if judge is not None and judge.api_key_env and not os.environ.get(judge.api_key_env):
        # Only this service sees its environment: a job must not fail on its first call.
        raise InvalidSpec(
            f"{field}.judge.api_key_env",
            f"{judge.api_key_env} is not set in the reward service's environment",
        )
    return LLMOptions(
        judge=judge,
        rubric=rubric,
        max_tokens=params.max_tokens,
        temperature=params.temperature,
        timeout_s=params.timeout_s,
        bounded=params.bounded,
    )


@dataclass(frozen=True)
class _Call:
    """One resolved judge: where to send, and the secret to send with it."""

    model: str
    base_url: str
    api_key: str

    def redact(self, text: str) -> str:
        return text.replace(self.api_key, "***") if len(self.api_key) >= 4 else text


class _LLMScorer(Scorer):
    name: ClassVar[str]  # the built-in's name (artfleet.specs.scorer_params), a metrics label

    def __init__(self, options: LLMOptions) -> None:
        self.options = options

    def _resolve(self, ctx: GroupContext) -> _Call:
        judge = self.options.judge
        if judge is None:
            policy = ctx.policy
            if policy is None or not policy.model or not policy.base_url:
                raise ScorerError(
                    UNAVAILABLE, "judge 'policy': the request carries no policy endpoint"
                )
            token = ctx.runtime.settings.api_token.get_secret_value()
            return _Call(policy.model, policy.base_url, token)
        # The OpenAI client insists on some key; endpoints without auth ignore it.
        key = os.environ.get(judge.api_key_env, "") if judge.api_key_env else "unused"
        if not key:
            raise ScorerError(UNAVAILABLE, f"{judge.api_key_env} is not set")
        return _Call(judge.model, judge.base_url, key)

    def _timeout(self, ctx: GroupContext) -> float:
        return self.options.timeout_s or ctx.runtime.settings.judge_timeout_s

    def _litellm_params(
        self, call: _Call, ctx: GroupContext, schema: dict[str, Any] | None
    ) -> dict[str, Any]:
        params: dict[str, Any] = {
            "api_base": call.base_url,
            "api_key": call.api_key,
            "max_tokens": self.options.max_tokens,
            "temperature": self.options.temperature,
            "timeout": self._timeout(ctx),
            "num_retries": 0,  # the failure policy decides what a failure means
            "metadata": tracking_metadata(ctx.runtime.metrics, self.name),
        }
        if schema is not None:
            params["additional_drop_params"] = ["response_format"]
            params["extra_body"] = {"structured_outputs": {"json": schema}}
        return params

    async def _fitted(
        self,
        ctx: GroupContext,
        call: _Call,
        lists: Lists,
        fixed: int,
        send: Callable[[Lists, int | None], Awaitable[T]],
    ) -> T:
        """`send(lists cut to the judge's context, the cap or None)`; when the judge still
        refuses the prompt as too long, once more, cut to what its refusal says."""
        contexts = ctx.runtime.judge_contexts
        budget = await contexts.budget(call.base_url, call.model, call.api_key)
        for last in (False, True):
            sent, cap = self._cut(lists, budget, fixed)
            try:
                return await send(sent, cap)
            except ScorerError:
                raise
            except Exception as exc:
                refused = refusal(exc)
                if refused is None or last:
                    raise
                used = fixed + ruler_chars(sent)
                budget = (budget or Budget(refused.context)).after(refused, used)
                contexts.learn(call.base_url, call.model, budget)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _cut(self, lists: Lists, budget: Budget | None, fixed: int) -> tuple[Lists, int | None]:
        if budget is None:  # a judge whose context is not known: sent as it is
            return lists, None
        try:
            return fit(lists, budget.prompt_chars(self.options.max_tokens) - fixed)
        except ValueError:
            raise ScorerError(
                ERROR,
                f"the judge's context ({budget.context} tokens, {self.options.max_tokens} "
                f"of them for its answer) cannot hold {len(lists)} trajectories even with "
                f"every text cut to {MIN_CAP} characters: use a judge with a longer context, "
                "fewer rollouts per group or shorter episodes",
            ) from None

    def _failure(self, exc: BaseException, call: _Call) -> ScorerError:
        message = call.redact(f"{type(exc).__name__}: {exc}")[:500]
        if isinstance(exc, TimeoutError | litellm.Timeout):
            return ScorerError(TIMEOUT, message)
        # litellm reports a refused connection as an InternalServerError.
        unavailable = (
            litellm.APIConnectionError,
            litellm.ServiceUnavailableError,
            litellm.InternalServerError,
            litellm.BadGatewayError,
        )
        if isinstance(exc, unavailable):
            return ScorerError(UNAVAILABLE, message)
        if isinstance(exc, pydantic.ValidationError | ValueError | json.JSONDecodeError):
            return ScorerError(INVALID_OUTPUT, message)
        return ScorerError(ERROR, message)


# ---------------------------------------------------------------- ruler


def _ruler_schema(n: int, max_tokens: int) -> dict[str, Any]:
    item = {
        "type": "object",
        "properties": {
            "trajectory_id": {"type": "string", "enum": [str(i) for i in range(1, n + 1)]},
            "explanation": {"type": "string", "maxLength": explanation_chars(max_tokens, n)},
            "score": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["trajectory_id", "explanation", "score"],
        "additionalProperties": False,
    }
    scores = {"type": "array", "items": item, "minItems": n, "maxItems": n}
    return {
        "type": "object",
        "properties": {"scores": scores},
        "required": ["scores"],
        "additionalProperties": False,
    }


def _clip01(value: float) -> float:
    return min(1.0, max(0.0, float(value)))


class RulerScorer(_LLMScorer):
    name = RULER

    def __init__(self, options: LLMOptions, replaces_reward: bool) -> None:
        super().__init__(options)
        self.replaces_reward = replaces_reward

    async def score(self, ctx: GroupContext, indices: Sequence[int]) -> list[Result]:
        trajectories = [codec.trajectory_from_proto(ctx.trajectories[i]) for i in indices]
        call = self._resolve(ctx)
        tools = trajectories[0].tools if trajectories else None
        fixed = _RULER_INSTRUCTION_CHARS + len(self.options.rubric)
        fixed += len(json.dumps(tools)) if tools else 0
        start = time.monotonic()
        try:
            if any(t.additional_histories for t in trajectories):
                raise ValueError("Additional histories are not supported by RULER yet.")
            lists: Lists = [cast(list[dict[str, Any]], t.messages()) for t in trajectories]

            async def send(sent: Lists, cap: int | None) -> tuple[list[Any], int | None]:
                return await self._ruler(ctx, call, sent, tools), cap

            scores, cap = await self._fitted(ctx, call, lists, fixed, send)
        except ScorerError:
            raise
        except Exception as exc:
            raise self._failure(exc, call) from exc
        finally:
            ctx.runtime.metrics.judge_seconds.labels(scorer=self.name).observe(
                time.monotonic() - start
            )
        if len(scores) != len(indices):
            raise ScorerError(INVALID_OUTPUT, "RULER returned no scores for this group")
        note = _cut_note(cap, call)
        results: list[Result] = []
        for score in scores:
            # ART asks for scores in [0, 1]; a weak judge may step outside.
            value = _clip01(float(score.score))
            logs = (f"RULER explanation: {score.explanation}", *note)
            results.append(Scored(value, logs, {"ruler_score": value}))
        return results

    async def _ruler(self, ctx: GroupContext, call: _Call, lists: Lists, tools: Any) -> list[Any]:
        schema = None
        if self.options.bounded:
            # ART sends a single trajectory when all are identical, and expects one score.
            expected = 1 if all(m == lists[0] for m in lists) else len(lists)
            schema = _ruler_schema(expected, self.options.max_tokens)
        return await asyncio.wait_for(
            art.rewards.ruler(
                cast(Any, lists),
                f"openai/{call.model}",
                extra_litellm_params=self._litellm_params(call, ctx, schema),
                rubric=self.options.rubric,
                tools=tools,
            ),
            self._timeout(ctx) + 5,  # litellm's own timeout should fire first
        )


def _cut_note(cap: int | None, call: _Call) -> tuple[str, ...]:
    """A log line on each trajectory whose judge saw its texts cut (they say why)."""
    if cap is None:
        return ()
    return (
        f"judge prompt cut to fit {call.model}'s context: texts over {cap} characters "
        "shortened in their middle",
    )


def _configure_ruler(params: RulerParams, field: str) -> Scorer:
    options = _options(params, field, params.rubric or RULER_DEFAULT_RUBRIC)
    return RulerScorer(options, replaces_reward=params.combine == "replace")


# ---------------------------------------------------------------- judge


class Verdict(BaseModel):
    explanation: str = Field(description="One short sentence.")
    score: float = Field(description="A score between 0 and 1.")


def _verdict_schema(max_tokens: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "explanation": {"type": "string", "maxLength": explanation_chars(max_tokens, 1)},
            "score": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["explanation", "score"],
        "additionalProperties": False,
    }


class JudgeCache:
    """Verdicts by (judge, rubric, trajectory): a group often holds identical answers, and
    a retried group is judged again. LRU; the key holds the model name, so a new policy
    step (name@step) never reuses an old step's verdicts."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[str, Scored] = OrderedDict()

    def get(self, key: str) -> Scored | None:
        item = self._items.get(key)
        if item is not None:
            self._items.move_to_end(key)
        return item

    def put(self, key: str, value: Scored) -> None:
        if self.size <= 0:
            return
        self._items[key] = value
        while len(self._items) > self.size:
            self._items.popitem(last=False)


class JudgeScorer(_LLMScorer):
    name = JUDGE

    async def score(self, ctx: GroupContext, indices: Sequence[int]) -> list[Result]:
        call = self._resolve(ctx)
        limit = asyncio.Semaphore(ctx.runtime.settings.judge_concurrency)

        async def one(i: int) -> Result:
            async with limit:
                return await self._judge(ctx, call, i)

        return list(await asyncio.gather(*(one(i) for i in indices)))

    def _system(self) -> str:
        return (
            "You grade one trajectory of an AI agent against a rubric. Reply with JSON: an"
            " `explanation` (one short sentence) and a `score` from 0 to 1.\n\nRubric:\n"
            + self.options.rubric
        )

    def _messages(self, trajectory: list[dict[str, Any]]) -> list[dict[str, str]]:
        user = "<trajectory>\n" + json.dumps(trajectory, default=str) + "\n</trajectory>"
        return [{"role": "system", "content": self._system()}, {"role": "user", "content": user}]

    async def _judge(self, ctx: GroupContext, call: _Call, i: int) -> Result:
        trajectory = codec.trajectory_from_proto(ctx.trajectories[i]).messages()
        lists: Lists = [cast(list[dict[str, Any]], trajectory)]

        async def send(sent: Lists, cap: int | None) -> Scored:
            return await self._verdict(ctx, call, sent[0], cap)

        try:
            return await self._fitted(ctx, call, lists, len(self._system()), send)
        except ScorerError as exc:
            return exc
        except Exception as exc:
            return self._failure(exc, call)

    async def _verdict(
        self, ctx: GroupContext, call: _Call, trajectory: list[dict[str, Any]], cap: int | None
    ) -> Scored:
        messages = self._messages(trajectory)
        opts = self.options
        key = hashlib.sha256(
            json.dumps(
                [call.base_url, call.model, opts.max_tokens, opts.temperature, messages]
            ).encode()
        ).hexdigest()
        metrics, cache = ctx.runtime.metrics, ctx.runtime.judge_cache
        cached = cache.get(key) if cache is not None else None
        metrics.judge_cache.labels(scorer=self.name, result="hit" if cached else "miss").inc()
        if cached is not None:
            return cast(Scored, cached)
        params = self._litellm_params(
            call, ctx, _verdict_schema(opts.max_tokens) if opts.bounded else None
        )
        start = time.monotonic()
        try:
            response = await litellm.acompletion(
                model=f"openai/{call.model}",
                messages=messages,
                response_format=Verdict,
                caching=False,
                **params,
            )
        finally:
            metrics.judge_seconds.labels(scorer=self.name).observe(time.monotonic() - start)
        verdict = Verdict.model_validate_json(response.choices[0].message.content or "{}")
        logs = (f"judge: {verdict.explanation}", *_cut_note(cap, call))
        result = Scored(_clip01(verdict.score), logs)
        if cache is not None:
            cache.put(key, result)
        return result


def _configure_judge(params: JudgeParams, field: str) -> Scorer:
    return JudgeScorer(_options(params, field, params.rubric))


LLM_SCORERS = (
    builtin(RULER, "ART's RULER: an LLM judge ranks the group's trajectories", _configure_ruler),
    builtin(JUDGE, "an LLM judge scores each trajectory against a rubric", _configure_judge),
)

__all__ = ["LLM_SCORERS", "JudgeCache"]
