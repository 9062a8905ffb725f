"""A judge whose context cannot hold the group as it is: RULER's and the judge's prompts are
cut to fit (artfleet_reward.scorers.judge_context), against a fake vLLM-like judge that
counts tokens, lists its `max_model_len` (or not) and refuses a prompt that is too long
with vLLM's own message."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from artfleet.contracts import messages
from artfleet.v1 import common_pb2 as pb
from artfleet_reward.composite import score_group
from artfleet_reward.metrics import RewardMetrics
from artfleet_reward.scorers.base import GroupContext, Runtime
from artfleet_reward.scorers.judge_context import (
    MIN_CAP,
    Budget,
    ContextRefusal,
    cut,
    fit,
    refusal,
    ruler_chars,
)
from artfleet_reward.scorers.llm import JudgeCache
from artfleet_reward.settings import RewardSettings
from artfleet_reward.spec import resolve_spec

CONTEXT = 2048
CHARS_PER_TOKEN = 3.5  # the fake judge's "tokenizer"
VLLM_REFUSAL = (
    "This model's maximum context length is {context} tokens. However, you requested "
    "{total} tokens ({prompt} in the messages, {answer} in the completion). Please reduce "
    "the length of the messages or completion."
)


@dataclass
class FakeJudge:
    lists_context: bool
    url: str = ""
    prompts: list[int] = field(default_factory=list)  # tokens of each prompt it was sent
    refused: int = 0

    async def models(self, request: web.Request) -> web.Response:
        entry: dict[str, Any] = {"id": "judge", "object": "model"}
        if self.lists_context:
            entry["max_model_len"] = CONTEXT
        return web.json_response({"object": "list", "data": [entry]})

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        text = "".join(str(m.get("content", "")) for m in body["messages"])
        tokens = int(len(text) / CHARS_PER_TOKEN) + 1
        answer = int(body.get("max_tokens") or 16)
        self.prompts.append(tokens)
        if tokens + answer > CONTEXT:
            self.refused += 1
            message = VLLM_REFUSAL.format(
                context=CONTEXT, total=tokens + answer, prompt=tokens, answer=answer
            )
            error = {"object": "error", "message": message, "type": "BadRequestError", "code": 400}
            return web.json_response(error, status=400)
        n = len(re.findall(r'<trajectory id="\d+">', text))
        if n:  # RULER
            scores = [
                {"trajectory_id": str(i), "explanation": "ok", "score": i / 10}
                for i in range(1, n + 1)
            ]
            content = json.dumps({"scores": scores})
        else:
            content = json.dumps({"explanation": "ok", "score": 0.7})
        return web.json_response(
            {
                "id": "c1",
                "object": "chat.completion",
                "created": 0,
                "model": "judge",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": content},
                    }
                ],
                "usage": {"prompt_tokens": tokens, "completion_tokens": 8, "total_tokens": tokens},
            }
        )


async def _serve(judge: FakeJudge) -> AsyncIterator[FakeJudge]:
    app = web.Application()
    app.router.add_get("/v1/models", judge.models)
    app.router.add_post("/v1/chat/completions", judge.chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    judge.url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    try:
        yield judge
    finally:
        await runner.cleanup()


@pytest.fixture
async def listing_judge() -> AsyncIterator[FakeJudge]:
    async for judge in _serve(FakeJudge(lists_context=True)):
        yield judge


@pytest.fixture
async def silent_judge() -> AsyncIterator[FakeJudge]:
    async for judge in _serve(FakeJudge(lists_context=False)):
        yield judge


def _group(n: int = 4, chars: int = 3000) -> list[pb.Trajectory]:
    """`n` episodes of one task whose long answers differ: far over a 2048-token judge."""
    return [
        messages.trajectory_to_proto(
            [
                {"role": "system", "content": "You are an agent. " * 20},
                {"role": "user", "content": "Write the notes file."},
                {"role": "assistant", "content": f"attempt {i}: " + "cat notes.txt; " * chars},
            ],
            None,
            0.0,
        )
        for i in range(n)
    ]


def _runtime() -> Runtime:
    settings = RewardSettings(api_token="unit-test-token")  # type: ignore[arg-type]
    return Runtime(settings, RewardMetrics(CollectorRegistry()), JudgeCache(16))


def _ctx(trajectories: list[pb.Trajectory], runtime: Runtime | None = None) -> GroupContext:
    episodes = [pb.Episode() for _ in trajectories]
    return GroupContext(trajectories, episodes, None, runtime or _runtime())


def _spec(scorer: str, url: str) -> Any:
    params = {"judge": {"base_url": url, "model": "judge"}, "timeout_s": 10}
    return resolve_spec(
        pb.RewardSpec(
            scorers=[pb.ScorerSpec(name=scorer, params_json=json.dumps(params), on_error="zero")]
        )
    )


async def test_ruler_cuts_the_group_to_a_judge_that_lists_its_context(
    listing_judge: FakeJudge,
) -> None:
    outcome = await score_group(_spec("ruler", listing_judge.url), _ctx(_group()))
    assert outcome.failures == []
    assert [t.components["ruler"] for t in outcome.trajectories] == [0.1, 0.2, 0.3, 0.4]
    # One call, and it fit: the listing said the context before anything was sent.
    assert listing_judge.refused == 0 and len(listing_judge.prompts) == 1
    assert listing_judge.prompts[0] + 512 <= CONTEXT
    assert any("judge prompt cut to fit" in line for line in outcome.trajectories[0].logs)


async def test_a_judge_that_lists_no_context_is_cut_to_what_its_refusal_says(
    silent_judge: FakeJudge,
) -> None:
    runtime = _runtime()  # one per reward service
    outcome = await score_group(_spec("ruler", silent_judge.url), _ctx(_group(), runtime))
    assert outcome.failures == []
    assert silent_judge.refused == 1 and len(silent_judge.prompts) == 2
    assert silent_judge.prompts[1] + 512 <= CONTEXT
    # The next group is cut at once: the refusal taught the judge's context.
    await score_group(_spec("ruler", silent_judge.url), _ctx(_group(), runtime))
    assert silent_judge.refused == 1 and len(silent_judge.prompts) == 3


async def test_the_absolute_judge_fits_each_trajectory(listing_judge: FakeJudge) -> None:
    outcome = await score_group(_spec("judge", listing_judge.url), _ctx(_group(2, 6000)))
    assert outcome.failures == []
    assert [t.components["judge"] for t in outcome.trajectories] == [0.7, 0.7]
    assert listing_judge.refused == 0 and all(p + 256 <= CONTEXT for p in listing_judge.prompts)


async def test_a_group_too_large_for_any_cut_is_a_clear_scorer_error(
    listing_judge: FakeJudge,
) -> None:
    outcome = await score_group(_spec("ruler", listing_judge.url), _ctx(_group(64, 10)))
    [failure] = outcome.failures
    assert f"judge's context ({CONTEXT} tokens, 512 of them for its answer)" in failure.message
    assert "cannot hold 64 trajectories" in failure.message
    assert listing_judge.prompts == []  # nothing was sent that could not fit


def test_fit_keeps_what_fits_and_cuts_every_text_with_one_cap() -> None:
    short = [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "ho"}]]
    assert fit(short, 1000) == (short, None)
    task = {"role": "user", "content": "t" * 500}
    long = [[task, {"role": "assistant", "content": str(i) * 2000}] for i in range(3)]
    fitted, cap = fit(long, 1500)
    assert cap is not None and MIN_CAP <= cap < 500
    assert ruler_chars(fitted) <= 1500 < ruler_chars(long)
    assert ruler_chars(cut(long, cap + 1)) > 1500  # the largest cap that fits
    # The shared task stays equal in every trajectory (RULER sends it once).
    assert all(m[0] == fitted[0][0] for m in fitted) and "chars cut" in fitted[0][1]["content"]
    with pytest.raises(ValueError):
        fit(long, 100)


def test_refusals_of_vllm_and_the_trainers_server_are_read() -> None:
    vllm = VLLM_REFUSAL.format(context=2048, total=2561, prompt=2049, answer=512)
    assert refusal(ValueError(vllm)) == ContextRefusal(2048, 2049)
    newer = "maximum context length is 2048 tokens, your request has at least 2049 input tokens"
    assert refusal(ValueError(newer)) == ContextRefusal(2048, 2049)
    torch = "the prompt has 3000 tokens; this model's context is 2048 tokens"
    assert refusal(ValueError(torch)) == ContextRefusal(2048, 3000)
    assert refusal(ValueError("connection refused")) is None
    learned = Budget(4096).after(ContextRefusal(2048, 2000), 5000)
    assert learned == Budget(2048, 2.5)
    assert Budget(2048).after(ContextRefusal(2048, None), 5000).chars_per_token == 1.5
