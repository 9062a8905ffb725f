"""The torch backend end to end with the real SmolLM2-135M: serve, batch, train, resume.

One backend (one event loop) for the whole module: loading the model is the slow part.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import aiohttp
import gguf
import openai
import pytest
import pytest_asyncio
import torch
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion
from openai.types.chat.chat_completion import Choice
from prometheus_client import REGISTRY

from artfleet.contracts import base_models, embedded_model, seeds
from artfleet.contracts.chat_template import CHATML_TEMPLATE, TOOLS_CHATML_TEMPLATE
from artfleet.contracts.checkpoint_layout import BEST_FILE, write_best
from artfleet_trainer.backends.art_compat import art
from artfleet_trainer.torch_backend import model_loader, train_config, training
from artfleet_trainer.torch_backend.backend import TorchBackend
from artfleet_trainer.torch_serving.service import TorchServing

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

KEY = "integration-test-key"
PROMPTS = ["Name a color.", "Name an animal."]


@dataclass
class Fleet:
    backend: TorchBackend
    model: art.TrainableModel[Any, Any]
    client: AsyncOpenAI
    path: Path


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def fleet(module_tmp: Callable[[str], Path]) -> AsyncIterator[Fleet]:
    path = module_tmp("art")
    backend = TorchBackend(path=str(path), api_key=KEY)
    model: art.TrainableModel[Any, Any] = art.TrainableModel(
        name="agent", project="it", base_model="smollm2-135m-instruct"
    )
    await model.register(backend)
    assert model.inference_base_url is not None
    client = AsyncOpenAI(base_url=model.inference_base_url, api_key=KEY, max_retries=0)
    try:
        yield Fleet(backend, model, client, path)
    finally:
        await client.close()
        await backend.close()


async def _ask(
    fleet: Fleet,
    prompt: str,
    *,
    n: int = 1,
    max_tokens: int = 8,
    temperature: float = 1.0,
    top_logprobs: int | None = None,
    seed: int | None = None,
    model: str | None = None,
) -> ChatCompletion:
    return await fleet.client.chat.completions.create(
        model=model or fleet.model.get_inference_name(),
        messages=[{"role": "user", "content": prompt}],
        n=n,
        max_tokens=max_tokens,
        temperature=temperature,
        logprobs=True,
        top_logprobs=top_logprobs,
        seed=seed,
    )


async def test_tokenizer_has_chatml_template_and_real_pad(fleet: Fleet) -> None:
    tokenizer = fleet.backend._states["agent"].tokenizer
    assert "<|im_start|>" in tokenizer.chat_template
    assert 0 <= tokenizer.pad_token_id < tokenizer.vocab_size


async def test_models_lists_the_served_policy(fleet: Fleet) -> None:
    assert fleet.model.get_inference_name() == "agent@0"
    models = await fleet.client.models.list()
    assert [m.id for m in models.data] == ["agent@0"]


async def test_chat_completion_with_n_and_token_id_logprobs(fleet: Fleet) -> None:
    response = await _ask(fleet, PROMPTS[0], n=2, top_logprobs=2, seed=3)
    assert response.model == "agent@0"
    assert len(response.choices) == 2
    end_of_turn = fleet.backend._states["agent"].tokenizer.eos_token_id
    for choice in response.choices:
        assert choice.finish_reason in ("stop", "length")
        assert choice.logprobs is not None and choice.logprobs.content
        tokens = choice.logprobs.content
        assert all(t.token.startswith("token_id:") for t in tokens)
        assert all(t.logprob <= 0 and len(t.top_logprobs) == 2 for t in tokens)
        ids = [int(t.token.split(":")[1]) for t in tokens]
        assert (ids[-1] == end_of_turn) == (choice.finish_reason == "stop")
        assert "<|im_end|>" not in (choice.message.content or "")
    assert response.usage is not None
    assert response.usage.completion_tokens == sum(
        len(c.logprobs.content or []) for c in response.choices if c.logprobs
    )


async def test_return_token_ids_gives_the_exact_ids_through_the_openai_client(
    fleet: Fleet,
) -> None:
    # As a rollout asks (vLLM's extension through `extra_body`): the ids land in the
    # OpenAI objects' extra fields, where ART after 0.5.18 reads them.
    response = await fleet.client.chat.completions.create(
        model=fleet.model.get_inference_name(),
        messages=[{"role": "user", "content": PROMPTS[1]}],
        n=2,
        max_tokens=8,
        logprobs=True,
        extra_body={"return_token_ids": True},
    )
    tokenizer = fleet.backend._states["agent"].tokenizer
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPTS[1]}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    assert response.model_extra is not None
    assert response.model_extra["prompt_token_ids"] == list(prompt)
    assert response.usage is not None and response.usage.prompt_tokens == len(prompt)
    for choice in response.choices:
        assert choice.logprobs is not None and choice.logprobs.content
        from_logprobs = [int(t.token.split(":")[1]) for t in choice.logprobs.content]
        assert choice.model_extra == {"token_ids": from_logprobs}


def _batch_histogram(bucket: str) -> float:
    labels = {"le": bucket}
    return REGISTRY.get_sample_value("artfleet_trainer_batch_size_bucket", labels) or 0.0


async def test_concurrent_requests_are_batched(fleet: Fleet) -> None:
    small, total = _batch_histogram("2.0"), _batch_histogram("+Inf")
    responses = await asyncio.gather(*[_ask(fleet, f"Count to {i}.") for i in range(4)])
    assert all(len(r.choices) == 1 for r in responses)
    # Some slice held more than 2 rows: the 4 requests were generated together.
    assert (_batch_histogram("+Inf") - total) - (_batch_histogram("2.0") - small) >= 1


async def _group(fleet: Fleet, job_seed: int) -> list[list[int]]:
    """The demo's group: 8 rollouts of one math-single prompt at once, 48 tokens at the
    job's temperature, each request seeded as a rollout's first call is."""
    group = seeds.group_seed(job_seed, 1, 0)
    responses = await asyncio.gather(
        *[
            _ask(
                fleet,
                "What is 17 + 25? Reply with the final answer as a number.",
                max_tokens=48,
                temperature=0.7,
                seed=seeds.call_seed(seeds.rollout_seed(group, rollout), 0),
            )
            for rollout in range(8)
        ]
    )
    return [_token_ids(r.choices[0]) for r in responses]


def _token_ids(choice: Choice) -> list[int]:
    assert choice.logprobs is not None and choice.logprobs.content
    return [int(t.token.split(":")[1]) for t in choice.logprobs.content]


async def test_one_seed_samples_the_same_tokens_another_seed_others(fleet: Fleet) -> None:
    first = await _group(fleet, job_seed=7)
    assert len({tuple(ids) for ids in first}) > 1  # each rollout its own stream
    assert await _group(fleet, job_seed=7) == first  # batched alike or not
    assert await _group(fleet, job_seed=8) != first


async def test_wrong_key_is_401(fleet: Fleet) -> None:
    bad = AsyncOpenAI(base_url=fleet.model.inference_base_url, api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        await bad.chat.completions.create(
            model="agent@0", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    await bad.close()
    assert caught.value.status_code == 401


@pytest.mark.parametrize("name", ["ghost", "agent@7"])
async def test_unknown_model_or_step_is_404(fleet: Fleet, name: str) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        await fleet.client.chat.completions.create(
            model=name, messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    assert caught.value.status_code == 404


async def test_malformed_body_is_400(fleet: Fleet) -> None:
    url = f"{fleet.model.inference_base_url}/chat/completions"
    headers = {"Authorization": f"Bearer {KEY}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=b"{oops", headers=headers) as response,
    ):
        assert response.status == 400
        assert "error" in await response.json()


async def _groups(
    fleet: Fleet, rewards: list[float], model: str | None = None
) -> list[art.TrajectoryGroup]:
    """Real completions (of `model`, else the fleet's) as ART trajectories (assistant
    turns stay `Choice` objects)."""
    responses = await asyncio.gather(
        *[
            _ask(fleet, p, n=len(rewards), max_tokens=12, temperature=1.0, model=model)
            for p in PROMPTS
        ]
    )
    groups = []
    for prompt, response in zip(PROMPTS, responses, strict=True):
        trajectories = []
        for choice, reward in zip(response.choices, rewards, strict=True):
            assert isinstance(choice, Choice)
            messages: art.types.MessagesAndChoices = [{"role": "user", "content": prompt}, choice]
            trajectories.append(art.Trajectory(messages_and_choices=messages, reward=reward))
        groups.append(art.TrajectoryGroup(trajectories))
    return groups


async def test_old_logprobs_equal_new_before_any_update(fleet: Fleet) -> None:
    groups = await _groups(fleet, [0.0, 1.0, 0.5, 0.2])
    state = fleet.backend._states["agent"]
    _, dev_config = train_config.build_train_configs(5e-6, {})
    batch = training.pack_trajectory_groups(state.tokenizer, groups, dev_config, max_context=8192)
    assert batch is not None and batch.num_results == 8
    packed = batch.tensors

    def score() -> torch.Tensor:
        with torch.no_grad():
            return training.compute_logprobs(
                state.peft_model,
                packed["tokens"],
                packed["input_pos"],
                packed["group_ids"],
                packed["parent_ids"],
            )[0]

    new = await fleet.backend.run_on_torch_thread(score)  # where the backend's model runs
    old = torch.nn.functional.pad(packed["logprobs"][:, 1:], (0, 1), value=float("nan"))
    sampled = ~torch.isnan(old)
    assert int(sampled.sum()) == int(packed["assistant_mask"].sum())
    assert float((old[sampled] - new[sampled]).abs().max()) < 1e-4


def _lora_weights(fleet: Fleet) -> dict[str, torch.Tensor]:
    peft_model = fleet.backend.peft_model_of(fleet.model)
    return {n: p.detach().clone() for n, p in peft_model.named_parameters() if "lora_" in n}


async def test_train_updates_weights_saves_and_serves_step_1(fleet: Fleet) -> None:
    groups = await _groups(fleet, [0.0, 1.0, 0.5, 0.2])
    before = _lora_weights(fleet)
    result = await fleet.backend.train(fleet.model, groups, learning_rate=1e-4)
    after = _lora_weights(fleet)
    assert result.step == 1
    assert result.metrics["trained_sequences"] == 8
    assert result.metrics["grad_norm"] > 0 and result.metrics["tokens"] > 0
    assert any(not torch.equal(before[n], after[n]) for n in before)
    checkpoint = fleet.path / "it" / "models" / "agent" / "checkpoints" / "0001"
    assert (checkpoint / "adapter_model.safetensors").is_file()
    assert fleet.model.get_inference_name() == "agent@1"
    assert await fleet.model.get_step() == 1
    assert (await _ask(fleet, "hi")).model == "agent@1"
    # Step 0 is still served (evaluations of older checkpoints): from its saved adapter.
    assert await _answered_as(fleet, "agent@0") == "agent@0"


async def test_equal_rewards_still_advance_the_step(fleet: Fleet) -> None:
    groups = await _groups(fleet, [1.0, 1.0])
    before = _lora_weights(fleet)
    result = await fleet.backend.train(fleet.model, groups, learning_rate=5e-6)
    assert result.step == 2
    assert result.metrics["trained_sequences"] == 0
    assert all(torch.equal(before[n], w) for n, w in _lora_weights(fleet).items())
    assert (fleet.path / "it" / "models" / "agent" / "checkpoints" / "0002").is_dir()
    assert fleet.model.get_inference_name() == "agent@2"


async def _answered_as(fleet: Fleet, model: str) -> str:
    reply = await fleet.client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    return reply.model


async def test_older_steps_and_best_are_served_beside_the_training_policy(fleet: Fleet) -> None:
    # The job trains at step 2 (live weights); step 1, older, loads from its checkpoint.
    assert fleet.model.get_inference_name() == "agent@2"
    assert await _answered_as(fleet, "agent@1") == "agent@1"
    assert await _answered_as(fleet, "agent@latest") == "agent@2"
    assert await _answered_as(fleet, "agent") == "agent@2"
    with pytest.raises(openai.NotFoundError, match="marked best") as missing:
        await _answered_as(fleet, "agent@best")  # no eval has marked one
    assert missing.value.param == "model"
    model_dir = fleet.path / "it" / "models" / "agent"
    write_best(model_dir, 1, "pass_at_k", 1.0)
    assert await _answered_as(fleet, "agent@best") == "agent@1"
    # Best = the step in training: its live weights answer, no second copy is loaded.
    write_best(model_dir, 2, "pass_at_k", 1.0)
    assert await _answered_as(fleet, "agent@best") == "agent@2"
    assert "agent@2" not in cast(TorchServing, fleet.backend.serving)._frozen._loaded
    with pytest.raises(openai.BadRequestError, match="name@best") as bad:
        await _answered_as(fleet, "agent@newest")
    assert bad.value.param == "model"
    (model_dir / BEST_FILE).unlink()  # the tests after this one know no mark


async def test_a_fresh_backend_resumes_from_the_latest_checkpoint(fleet: Fleet) -> None:
    trained = _lora_weights(fleet)
    again = TorchBackend(path=str(fleet.path), api_key=KEY)
    model: art.TrainableModel[Any, Any] = art.TrainableModel(
        name="agent", project="it", base_model="smollm2-135m-instruct"
    )
    await again.register(model)  # no server needed: register alone loads the weights
    try:
        assert await again._get_step(model) == 2
        assert again._model_inference_name(model) == "agent@2"
        resumed = again.peft_model_of(model)
        weights = {n: p.detach() for n, p in resumed.named_parameters() if "lora_" in n}
        assert weights.keys() == trained.keys()
        assert all(torch.equal(trained[n], weights[n]) for n in trained)
    finally:
        await again.close()


async def test_a_full_fine_tune_samples_trains_and_serves_its_model_folders(fleet: Fleet) -> None:
    """`finetune: full` (ART's `init_args.full_finetuning`, as the job runner sets it): a
    copy of the base of its own beside the LoRA tenant, every weight trained; its
    checkpoints are whole model folders, an older one served from its folder."""
    config = art.dev.InternalModelConfig(init_args=art.dev.InitArgs(full_finetuning=True))
    full: art.TrainableModel[Any, Any] = art.TrainableModel(
        name="full", project="it", base_model="smollm2-135m-instruct", _internal_config=config
    )
    await full.register(fleet.backend)
    try:
        assert full.get_inference_name() == "full@0"
        groups = await _groups(fleet, [0.0, 1.0, 0.5, 0.2], model="full@0")
        network = fleet.backend.peft_model_of(full).get_base_model()
        assert network is not fleet.backend.peft_model_of(fleet.model).get_base_model()
        weight = network.get_decoder().layers[0].mlp.down_proj.weight
        before = weight.detach().clone()
        result = await fleet.backend.train(full, groups, learning_rate=1e-5)
        assert result.step == 1 and result.metrics["trained_sequences"] == 8
        assert not torch.equal(before, weight.detach())  # a base weight moved
        checkpoint = fleet.path / "it" / "models" / "full" / "checkpoints" / "0001"
        assert (checkpoint / "config.json").is_file()
        assert (checkpoint / "model.safetensors").is_file()
        assert (checkpoint / "optimizer").is_dir()  # AdamW's state, saved by DCP
        assert not (checkpoint / "adapter_config.json").exists()
        assert await _answered_as(fleet, "full") == "full@1"
        assert await _answered_as(fleet, "full@0") == "full@0"  # from its model folder
        # the LoRA tenant on the shared base is untouched by it
        assert await _answered_as(fleet, "agent") == "agent@2"
    finally:
        await fleet.backend.unregister(full.name)


async def test_the_gguf_carries_smollm2s_chat_template(fleet: Fleet) -> None:
    reader = gguf.GGUFReader(str(embedded_model.embedded_gguf_path()))
    field = reader.fields["tokenizer.chat_template"]
    assert bytes(field.parts[field.data[0]]).decode() == CHATML_TEMPLATE


async def test_a_local_hf_folder_is_a_base_model(fleet: Fleet) -> None:
    folder = str(base_models.DEFAULT_CACHE_DIR.expanduser())  # written by the fixture
    loaded = await fleet.backend.run_on_torch_thread(model_loader.load_base_model, folder)
    assert loaded.source == folder
    assert loaded.tokenizer.chat_template == TOOLS_CHATML_TEMPLATE


def _staging_leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if ".tmp-" in p.name]


async def test_first_load_converts_the_gguf_into_a_cache(fleet: Fleet, tmp_path: Path) -> None:
    cache = tmp_path / "smollm2"
    loaded = await fleet.backend.run_on_torch_thread(
        functools.partial(model_loader.load_base_model, cache_dir=cache)
    )
    assert loaded.source == str(cache)
    assert (cache / "model.safetensors").is_file() and (cache / ".artfleet-complete").is_file()
    assert not _staging_leftovers(tmp_path)
    assert loaded.tokenizer.chat_template == TOOLS_CHATML_TEMPLATE
    assert loaded.tokenizer.pad_token_id == loaded.tokenizer.eos_token_id == 2
    config = json.loads((cache / "config.json").read_text())
    assert "quantization_config" not in config  # plain fp32 weights, no GGUF left
