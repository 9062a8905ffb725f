"""Multi-turn training on exactly the sampled ids, in exactly the sampled context.

A word-level tokenizer (`w<ii>` is token i) and a chat template in the shape of ChatML:
the generation prompt is the assistant header (w04), w03 ends a turn, and the model's
sampled ids end with w03 as SmolLM2's end with <|im_end|>. The engine's prompts are built
here as an engine would send them: either rendering earlier turns as sampled, or
re-rendering one differently (a tool call written back with other spacing).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from openai.types.chat.chat_completion import Choice
from tokenizers import Tokenizer, models, pre_tokenizers
from trained_tokens import mismatches, sampled_turns
from transformers import PreTrainedTokenizerFast

from artfleet_trainer.backends.art_compat import art
from artfleet_trainer.torch_backend.training import tokenize_groups

HEADERS = "{'system': 'w05', 'user': 'w06', 'assistant': 'w04', 'tool': 'w07'}"
TEMPLATE = (
    "{% for m in messages %}{{ " + HEADERS + "[m['role']] }} {{ m['content'] }} w03 "
    "{% endfor %}{% if add_generation_prompt %}w04{% endif %}"
)
START = [5, 10, 3, 6, 11, 3, 4]  # system w10, user w11, then the generation prompt
TURN1 = [20, 21, 3]
OBSERVATION = [3, 7, 30, 3, 4]  # the turn's end, the tool result w30, the next header


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.WordLevel({f"w{i:02d}": i for i in range(64)}, unk_token="w00"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="w02", pad_token="w01")
    tok.chat_template = TEMPLATE
    return tok


def choice(prompt: list[int], sampled: list[int], lp: float, with_ids: bool = True) -> Choice:
    entries: list[dict[str, Any]] = [
        {"token": f"token_id:{t}", "logprob": lp - i, "bytes": None, "top_logprobs": []}
        for i, t in enumerate(sampled)
    ]
    text = " ".join(f"w{t:02d}" for t in sampled[:-1])
    data: dict[str, Any] = {
        "finish_reason": "stop", "index": 0, "logprobs": {"content": entries},
        "message": {"role": "assistant", "content": text},
    }  # fmt: skip
    if with_ids:
        data.update(prompt_token_ids=prompt, token_ids=sampled)
    return Choice.model_validate(data)


def trajectory(turn2_prompt: list[int], reward: float, with_ids: bool = True) -> art.Trajectory:
    items: list[Any] = [
        {"role": "system", "content": "w10"},
        {"role": "user", "content": "w11"},
        choice(START, TURN1, -0.1, with_ids),
        {"role": "tool", "content": "w30", "tool_call_id": "c1"},
        choice(turn2_prompt, [22, 3], -0.2, with_ids),
    ]
    return art.Trajectory(messages_and_choices=items, reward=reward)


def tokenized(tokenizer: Any, *trajectories: art.Trajectory) -> list[Any]:
    return tokenize_groups(tokenizer, [art.TrajectoryGroup(list(trajectories))], {})


AS_SAMPLED = [*START, 20, 21, *OBSERVATION]
RE_RENDERED = [*START, 20, 23, *OBSERVATION]  # turn 1 came back as other ids


def test_history_rendered_as_sampled_is_one_sequence(tokenizer: Any) -> None:
    results = tokenized(tokenizer, trajectory(AS_SAMPLED, 0.0), trajectory(AS_SAMPLED, 1.0))
    assert len(results) == 2
    for result in results:
        assert result.token_ids == [*AS_SAMPLED, 22, 3]
        turns = sampled_turns(result.trajectory.messages_and_choices)
        assert mismatches([result], turns) == []
        assert sum(result.assistant_mask) == 5
        assert result.weight == pytest.approx(1 / 5)


def test_a_re_rendered_turn_splits_the_trajectory_at_it(tokenizer: Any) -> None:
    results = tokenized(tokenizer, trajectory(RE_RENDERED, 0.0), trajectory(RE_RENDERED, 1.0))
    assert len(results) == 4  # two sequences per trajectory
    assert sorted(len(r.token_ids) for r in results) == [10, 10, 16, 16]
    for result in results:
        turns = sampled_turns(result.trajectory.messages_and_choices)
        own = [r for r in results if r.trajectory is result.trajectory]
        assert mismatches(own, turns) == []
        assert result.weight == pytest.approx(1 / 5)  # ART's: one weight per trajectory
    assert {r.prompt_length for r in results} == {len(START) - 1}


def test_arts_own_tokenization_trains_turn_2_in_another_context(tokenizer: Any) -> None:
    """Without the engine's ids the trainer keeps ART's tokenization, and the check sees
    that turn 2 is trained after ids other than those it was sampled from."""
    group = art.TrajectoryGroup(
        [trajectory(RE_RENDERED, 0.0, False), trajectory(RE_RENDERED, 1.0, False)]
    )
    results = tokenize_groups(tokenizer, [group], {})
    assert len(results) == 2
    turns = [(TURN1, [-0.1, -1.1, -2.1], START), ([22, 3], [-0.2, -1.2], RE_RENDERED)]
    problems = mismatches([results[0]], turns)
    assert len(problems) == 1 and problems[0].startswith("turn 1: trained after another context")


def fake(token_ids: list[int], mask: list[int], logprobs: list[float]) -> SimpleNamespace:
    return SimpleNamespace(token_ids=token_ids, assistant_mask=mask, logprobs=logprobs)


GOOD = fake([1, 2, 3, 9, 8], [0, 0, 1, 1, 0], [float("nan")] * 2 + [-1.0, -2.0, float("nan")])
TURNS = [([3, 9], [-1.0, -2.0], [1, 2])]


def test_the_check_passes_what_was_sampled() -> None:
    assert mismatches([GOOD], TURNS) == []


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (fake([1, 2, 3, 9, 8], [0, 0, 1, 1, 1], [0, 0, -1.0, -2.0, -3.0]), "sampled ids"),
        (fake([1, 2, 3, 9, 8], [0, 1, 1, 1, 0], [0, 0, -1.0, -2.0, 0]), "sampled ids"),
        (fake([1, 2, 3, 9, 8], [0, 0, 1, 1, 0], [0, 0, -2.0, -1.0, 0]), "logprobs"),
        (fake([1, 4, 3, 9, 8], [0, 0, 1, 1, 0], [0, 0, -1.0, -2.0, 0]), "another context"),
    ],
    ids=["observation-trained", "prompt-trained", "logprobs-shifted", "context-re-rendered"],
)
def test_the_check_fails_each_departure(result: SimpleNamespace, expected: str) -> None:
    problems = mismatches([result], TURNS)
    assert problems and expected in problems[-1]
