"""Trajectory → proto → real Redis → back, then ART's tokenizer trains on every assistant turn.

Each assistant turn carries vLLM's exact token ids (`return_token_ids`), as the policy
server returns them: they must survive the trip and match the turn's logprob tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import pytest
import redis
from openai.types.chat.chat_completion import Choice
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from artfleet.contracts import codec
from artfleet.contracts.embedded_model import ensure_embedded_cache
from artfleet.v1 import common_pb2
from artfleet_trainer.backends.art_compat import art

pytestmark = pytest.mark.integration

MakeChoice = Callable[[str, list[int], list[float]], Choice]

TURNS = ("THOUGHT: list files\n```bash\nls\n```", "THOUGHT: done\n```bash\nsubmit\n```")


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(ensure_embedded_cache())


def _choice(
    tokenizer: PreTrainedTokenizerBase,
    make_choice: MakeChoice,
    history: list[Any],
    text: str,
    base: float,
) -> Choice:
    # The end-of-turn token closes the turn, as the policy server reports it.
    ids = [
        *tokenizer.encode(text, add_special_tokens=False),
        tokenizer.convert_tokens_to_ids("<|im_end|>"),
    ]
    sampled = make_choice(text, ids, [base - i / 100 for i in range(len(ids))])
    # The prompt the server saw: the chat template over the history, generation prompt on.
    messages: list[dict[str, str]] = [
        {"role": "assistant", "content": m.message.content or ""} if isinstance(m, Choice) else m
        for m in history
    ]
    prompt = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    extra = {"prompt_token_ids": [int(i) for i in cast(list[int], prompt)], "token_ids": ids}
    return Choice.model_validate({**sampled.model_dump(), **extra})


def _trajectory(
    tokenizer: PreTrainedTokenizerBase, make_choice: MakeChoice, reward: float
) -> art.Trajectory:
    history: list[Any] = [
        {"role": "system", "content": "You are a terminal agent."},
        {"role": "user", "content": "Task: list the files."},
    ]
    history.append(_choice(tokenizer, make_choice, history, TURNS[0], -0.5))
    history.append({"role": "user", "content": "exit code: 0\nstdout:\na.txt"})
    history.append(_choice(tokenizer, make_choice, history, TURNS[1], -0.7))
    return art.Trajectory(messages_and_choices=history, reward=reward, metrics={"turns": 2})


def _logprob_ids(choice: Choice) -> list[int]:
    assert choice.logprobs is not None and choice.logprobs.content is not None
    return [int(e.token.removeprefix("token_id:")) for e in choice.logprobs.content]


def test_redis_round_trip_stays_trainable(
    tokenizer: PreTrainedTokenizerBase, make_choice: MakeChoice, redis_url: str
) -> None:
    group = art.TrajectoryGroup(
        [_trajectory(tokenizer, make_choice, 0.1), _trajectory(tokenizer, make_choice, 0.9)]
    )
    store = redis.Redis.from_url(redis_url)
    store.set("artfleet:test:group", codec.group_to_proto(group).SerializeToString())
    raw: bytes = store.get("artfleet:test:group")  # type: ignore[assignment]
    back = codec.group_from_proto(common_pb2.TrajectoryGroup.FromString(raw))

    assert all(isinstance(t.messages_and_choices[2], Choice) for t in back.trajectories)
    for sent, got in zip(group.trajectories, back.trajectories, strict=True):
        sent_choices = [c for c in sent.messages_and_choices if isinstance(c, Choice)]
        got_choices = [c for c in got.messages_and_choices if isinstance(c, Choice)]
        assert len(got_choices) == 2
        for before, after in zip(sent_choices, got_choices, strict=True):
            # The exact ids survive, in the extra fields where ART reads them ...
            assert after.model_extra == before.model_extra
            assert after.model_extra is not None
            assert after.model_extra["prompt_token_ids"]
            # ... and the sampled ids are the logprob tokens.
            assert after.model_extra["token_ids"] == _logprob_ids(after)
    results = list(
        art.preprocessing.tokenize.tokenize_trajectory_groups(
            tokenizer, [back], allow_training_without_logprobs=False, scale_rewards=True
        )
    )
    assert len(results) == 2  # both trajectories carry a non-zero advantage
    for result in results:
        choices = [c for c in result.trajectory.messages_and_choices if isinstance(c, Choice)]
        expected = [lp.logprob for c in choices for lp in c.logprobs.content]  # type: ignore[union-attr]
        trained = [lp for lp, m in zip(result.logprobs, result.assistant_mask, strict=True) if m]
        # Every token of every assistant turn is trainable, with the logprob it was sampled at.
        assert sum(result.assistant_mask) == len(expected)
        assert trained == pytest.approx(expected)
        assert not any(math.isnan(lp) for lp in trained)
        # ART's own tokenization of the whole conversation starts with the first turn's
        # prompt and sampled ids: the ids the server reported are the ones ART trains on.
        first = choices[0].model_extra or {}
        exact = [*first["prompt_token_ids"], *first["token_ids"]]
        assert result.token_ids[: len(exact)] == exact
