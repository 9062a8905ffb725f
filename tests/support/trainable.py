"""The trained-tokens check on a rollout's answer: the trainer's own tokenization of each
trajectory must train exactly the sampled tokens (see trained_tokens)."""

from __future__ import annotations

from typing import Any

from trained_tokens import mismatches, sampled_turns
from transformers import AutoTokenizer

from artfleet.contracts import codec
from artfleet.contracts.embedded_model import ensure_chat_template_and_pad, ensure_embedded_cache
from artfleet.v1 import rollout_pb2
from artfleet_trainer.torch_backend import training


def assert_trainable(response: rollout_pb2.RunGroupResponse) -> list[Any]:
    """ART trains every assistant turn of every trajectory on exactly the sampled token ids,
    with their logprobs, in the context each was sampled from (see trained_tokens)."""
    group = codec.group_from_proto(response.group)
    assert group.trajectories
    for i, trajectory in enumerate(group.trajectories):
        trajectory.reward = float(i)  # distinct rewards: ART drops zero-advantage groups
    tokenizer = AutoTokenizer.from_pretrained(ensure_embedded_cache())
    ensure_chat_template_and_pad(tokenizer)  # the template the server and training render
    results = training.tokenize_groups(tokenizer, [group], {})  # what the trainer trains on
    by_trajectory: dict[int, list[Any]] = {}
    for result in results:
        by_trajectory.setdefault(id(result.trajectory), []).append(result)
    assert len(by_trajectory) == len(group.trajectories)
    for own in by_trajectory.values():
        turns = sampled_turns(own[0].trajectory.messages_and_choices)
        assert turns
        problems = mismatches(own, turns)
        assert not problems, problems
    return results
