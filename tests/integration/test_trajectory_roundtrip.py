"""Trajectory → proto → real Redis → back, then ART's tokenizer trains on every assistant turn."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import redis
from art.preprocessing.tokenize import tokenize_trajectory_groups
from openai.types.chat.chat_completion import Choice
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from artfleet import codec
from artfleet.art_compat import art
from artfleet.v1 import common_pb2
from artfleet_trainer.torch_backend.model_loader import ensure_embedded_cache

pytestmark = pytest.mark.integration

MakeChoice = Callable[[str, list[int], list[float]], Choice]

TURNS = ("THOUGHT: list files\n```bash\nls\n```", "THOUGHT: done\n```bash\nsubmit\n```")


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(ensure_embedded_cache())


def _choice(
    tokenizer: PreTrainedTokenizerBase, make_choice: MakeChoice, text: str, base: float
) -> Choice:
    # The end-of-turn token closes the turn, as the policy server reports it.
    ids = [
        *tokenizer.encode(text, add_special_tokens=False),
        tokenizer.convert_tokens_to_ids("<|im_end|>"),
    ]
    return make_choice(text, ids, [base - i / 100 for i in range(len(ids))])


def _trajectory(
    tokenizer: PreTrainedTokenizerBase, make_choice: MakeChoice, reward: float
) -> art.Trajectory:
    return art.Trajectory(
        messages_and_choices=[
            {"role": "system", "content": "You are a terminal agent."},
            {"role": "user", "content": "Task: list the files."},
            _choice(tokenizer, make_choice, TURNS[0], -0.5),
            {"role": "user", "content": "exit code: 0\nstdout:\na.txt"},
            _choice(tokenizer, make_choice, TURNS[1], -0.7),
        ],
        reward=reward,
        metrics={"turns": 2},
    )


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
    results = list(
        tokenize_trajectory_groups(
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
