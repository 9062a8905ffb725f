"""TorchBackend._train_sft (ART's SFT protocol) on a tiny random Llama wearing SmolLM2's
tokenizer and chat template: only assistant tokens are labels, the loss on the samples
goes down, and the adapter is saved as the next checkpoint and served."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from api_fleet import tiny_model
from repo_paths import FIXTURES

from artfleet.specs.sft import SftModel
from artfleet_trainer.backends.art_compat import art
from artfleet_trainer.sft.data import load_samples
from artfleet_trainer.sft.phase import to_trajectories
from artfleet_trainer.torch_backend import TorchBackend, checkpoints, sft

OFFLINE_SAMPLES = FIXTURES / "sft" / "offline_samples.json"


@pytest.fixture(scope="module")
def model_dir(module_tmp: Callable[[str], Path]) -> Path:
    return tiny_model(module_tmp("tiny") / "model")


@pytest.fixture
async def registered(
    model_dir: Path, tmp_path: Path
) -> AsyncIterator[tuple[TorchBackend, art.TrainableModel]]:
    backend = TorchBackend(path=str(tmp_path / "art"), num_threads=1, train_num_threads=1)
    model: art.TrainableModel = art.TrainableModel(
        name="sft", project="t", base_model=str(model_dir)
    )
    await backend.register_model(model)
    try:
        yield backend, model
    finally:
        await backend.close()


def _trajectories() -> list[art.Trajectory]:
    return to_trajectories(
        load_samples(SftModel(data_path=str(OFFLINE_SAMPLES), min_score=0.5)).samples
    )


def test_only_assistant_turns_are_labels(model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    trajectory = _trajectories()[0]
    messages: list[Any] = list(trajectory.messages_and_choices)
    row = sft.tokenize_sft(tokenizer, trajectory, 4096)
    assert len(row.token_ids) == len(row.trainable)
    labelled = tokenizer.decode([t for t, m in zip(row.token_ids, row.trainable, strict=True) if m])
    assistant = [m["content"] for m in messages if m["role"] == "assistant"]
    for content in assistant:
        assert content in labelled
    assert "pr_description" not in labelled and "returncode" not in labelled
    assert "You are a helpful assistant" not in labelled
    # The template's own rendering of the whole conversation, token for token.
    whole = tokenizer.apply_chat_template(messages, tokenize=False)
    assert tokenizer.decode(row.token_ids) == whole
    with pytest.raises(sft.NotTrainable, match="longer than max_length"):
        sft.tokenize_sft(tokenizer, trajectory, 10)


async def test_train_sft_lowers_the_loss_and_saves_the_next_checkpoint(
    registered: tuple[TorchBackend, art.TrainableModel],
) -> None:
    backend, model = registered
    trajectories = _trajectories()
    before = await backend.sft_loss(model, trajectories)
    lora_b = {n: p.detach().clone() for n, p in backend.peft_model_of(model).named_parameters()}
    batches = []
    async for metrics in backend.train_sft(
        model, trajectories * 8, learning_rate=1e-2, batch_size=2
    ):
        batches.append(metrics)
    assert len(batches) == 8  # 16 trajectories, 2 per optimizer step
    assert all(b["loss/learning_rate"] == 1e-2 for b in batches)
    after = await backend.sft_loss(model, trajectories)
    # A random 32-wide model starts near uniform (ln 49152 = 10.8) and moves slowly:
    # 8 steps lower it by about 0.3 nats (measured); no update would leave it equal.
    assert after < before - 0.15, (before, after)
    assert batches[-1]["loss/train"] < batches[0]["loss/train"]
    # The next checkpoint (step 0 is the fresh adapter), served from now on.
    assert await backend.current_step(model) == 1
    assert backend.served_step(model) == 1
    moved = [
        n
        for n, p in backend.peft_model_of(model).named_parameters()
        if "lora_B" in n and not torch.equal(p, lora_b[n])
    ]
    assert moved, "LoRA B did not move"
    output = checkpoints.model_dir(str(Path(backend._path)), model)
    assert checkpoints.checkpoint_steps(output) == [0, 1]


async def test_art_protocol_call_with_per_batch_rates_and_drops(
    registered: tuple[TorchBackend, art.TrainableModel],
) -> None:
    backend, model = registered
    no_assistant = art.Trajectory(messages_and_choices=[{"role": "user", "content": "hi"}])
    config = art.types.TrainSFTConfig(learning_rate=[1e-3, 2e-3], batch_size=2)
    got = [
        m
        async for m in backend._train_sft(
            model, [*_trajectories(), no_assistant, *_trajectories()[:1]], config, {}
        )
    ]
    assert [m["loss/learning_rate"] for m in got] == [1e-3, 2e-3]
    assert got[0]["data/step_num_dropped_trajectories"] == 1.0
    # ART's own entry point drives the same protocol and logs the averaged metrics.
    await model.train_sft(_trajectories(), art.types.TrainSFTConfig(learning_rate=1e-3))
    assert await backend.current_step(model) == 2 and backend.served_step(model) == 2
    with pytest.raises(ValueError, match="no trainable SFT trajectory"):
        async for _ in backend._train_sft(model, [no_assistant], config, {}):
            pass
