"""The learning guard's shared parts (docs/testing.md, "learning guard"): the frozen batch
(tests/fixtures/learning_guard), a reference GRPO step written from ART's own pieces on plain
transformers + peft + torch (no code of the trainer's), and the engine's logprobs of a fixed
completion (`prompt_logprobs`, as both engines answer it)."""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import torch
from openai.types.chat.chat_completion import Choice
from peft import LoraConfig, get_peft_model

from artfleet_trainer.backends.art_compat import art

BATCH = Path(__file__).resolve().parents[1] / "fixtures" / "learning_guard" / "batch.json"
# ART's LoRA and optimizer settings, as its own backend's are (art/dev/get_model_config.py:
# adam_beta1, adam_beta2, weight_decay, max_grad_norm), written out: not the trainer's.
ART_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ART_BETAS, ART_WEIGHT_DECAY, ART_MAX_GRAD_NORM = (0.9, 0.99), 0.1, 0.1


def frozen_groups() -> list[art.TrajectoryGroup]:
    """The recorded groups as ART trajectories (each turn the engine's Choice, its ids kept)."""
    data = json.loads(BATCH.read_text())
    return [
        art.TrajectoryGroup(
            [
                art.Trajectory(
                    messages_and_choices=[*t["messages"], Choice.model_validate(t["choice"])],
                    reward=t["reward"],
                )
                for t in group
            ]
        )
        for group in data["groups"]
    ]


def sequences(groups: list[art.TrajectoryGroup]) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, sampled ids) of every trajectory, as the engine saw and sampled them."""
    out = []
    for group in groups:
        for trajectory in group.trajectories:
            choice = trajectory.messages_and_choices[-1]
            assert isinstance(choice, Choice)
            extra = choice.model_extra or {}
            prompt, sampled = extra["prompt_token_ids"], extra["token_ids"]
            out.append(([int(t) for t in prompt], [int(t) for t in sampled]))
    return out


def plain_logprobs(model: Any, prompt: list[int], sampled: list[int]) -> torch.Tensor:
    """The logprob of each sampled token after the prompt and the tokens before it: one
    plain forward (transformers' own causal mask and positions), an fp32 log-softmax."""
    ids = torch.tensor([prompt + sampled])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(sampled)[:, None])[:, 0]


def lora_model(base: Any, rank: int, seed: int) -> Any:
    """ART's LoRA (r, alpha 2r, every projection, no dropout), its init drawn from `seed`."""
    config = LoraConfig(
        r=rank, lora_alpha=2 * rank, target_modules=ART_TARGETS, lora_dropout=0.0,
        bias="none", task_type="CAUSAL_LM",
    )  # fmt: skip
    torch.manual_seed(seed)
    return get_peft_model(base, config)


@dataclass
class ReferenceStep:
    loss: float
    grad_norm: float  # before clipping


def reference_step(
    model: Any, tokenizer: Any, groups: list[art.TrajectoryGroup], learning_rate: float
) -> ReferenceStep:
    """One GRPO step as ART defines it: ART's tokenization, packing and loss
    (`art.loss.loss_fn`, CISPO defaults), the new logprobs from plain forwards of each
    trajectory unpacked from the row, then ART's clipping and a plain torch AdamW step.
    The batch must pack into one row (one optimizer step in ART's trainer)."""
    config, dev_config = art.types.TrainConfig(learning_rate=learning_rate), _dev_config()
    random.seed(0)  # ART draws group ids and shuffles the packed sequences
    results = art.preprocessing.tokenize.tokenize_trajectory_groups(
        tokenizer, groups, allow_training_without_logprobs=False, scale_rewards=True
    )
    packed = art.preprocessing.pack.packed_tensors_from_tokenized_results(
        list(results), 2048, pad_token_id=int(tokenizer.pad_token_id),
        truncate_long_results=False, advantage_balance=0.0, verbosity=0, pack_results=True,
    )  # fmt: skip
    assert packed["tokens"].shape[0] == 1, "the frozen batch must pack into one row"
    inputs = art.preprocessing.inputs.create_train_inputs(
        packed, 0, config, dev_config, warmup=False
    )
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        params, lr=learning_rate, betas=ART_BETAS, weight_decay=ART_WEIGHT_DECAY
    )
    model.train()
    new_logprobs = _unpacked_logprobs(model, inputs)
    loss = art.loss.loss_fn(inputs, new_logprobs, None, None, dev_config).policy_loss
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(params, ART_MAX_GRAD_NORM)
    optimizer.step()
    model.eval()
    return ReferenceStep(float(loss.detach()), float(norm))


def _dev_config() -> art.dev.TrainConfig:
    from art._backend_training import build_rl_train_configs

    return build_rl_train_configs(learning_rate=0.0)[1]


def _unpacked_logprobs(model: Any, inputs: Any) -> torch.Tensor:
    """[1, S]: at each position of a completion, the logprob of the row's next token,
    from a plain forward of the completion after its shared prompt (the parent group)."""
    tokens, groups = inputs["tokens"][0], inputs["group_ids"][0]
    parents, positions = inputs["parent_ids"][0], inputs["input_pos"][0]
    out = torch.zeros(tokens.shape[0])
    for group in sorted(set(groups.tolist()) - {-1}):
        own = (groups == group).nonzero()[:, 0]
        parent = int(parents[own[0]])
        if parent == group:
            continue  # the shared prompt: nothing of it is trained
        context = ((groups == parent) & (torch.arange(len(groups)) < own[0])).nonzero()[:, 0]
        where = torch.cat([context, own])
        assert positions[where].tolist() == list(range(len(where))), "not one sequence"
        logits = model(input_ids=tokens[where][None]).logits[0, :-1].float()
        scored = torch.log_softmax(logits, dim=-1).gather(1, tokens[where][1:, None])[:, 0]
        # Position p scores token p+1: within the completion, its next element here.
        out = out.index_put((own[:-1],), scored[len(context) : len(where) - 1])
    return out[None]


def engine_logprobs(
    base_url: str, key: str, model: str, prompt: list[int], sampled: list[int]
) -> list[float]:
    """The engine's logprob of each sampled token of a fixed completion: `prompt_logprobs`
    of prompt + completion (vLLM's completions API, which the torch engine answers too)."""
    ids = prompt + sampled
    body = {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0.0,
            "prompt_logprobs": 0}  # fmt: skip
    reply = httpx.post(
        f"{base_url.rstrip('/')}/completions",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=120,
    )
    assert reply.status_code == 200, reply.text
    entries = reply.json()["choices"][0]["prompt_logprobs"]
    out = []
    for position in range(len(prompt), len(ids)):
        chosen = (entries[position] or {}).get(str(ids[position]))
        out.append(float(chosen["logprob"]) if chosen else math.nan)
    return out
