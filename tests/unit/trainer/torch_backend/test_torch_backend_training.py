"""Step math of the torch backend on tiny tensors and a tiny randomly initialised Llama."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import get_peft_model
from tiny_llama import tiny_llama
from transformers import LlamaForCausalLM

from artfleet_trainer.torch_backend import checkpoints, train_config, training
from artfleet_trainer.torch_backend.worker import (
    available_cores,
    cores_busy_elsewhere,
    default_num_threads,
    torch_threads,
    training_threads,
)
from artfleet_trainer.torch_serving.generation import _left_pad
from artfleet_trainer.torch_serving.sampling import top_p_filter

NEG_INF = torch.finfo(torch.float32).min


def _tiny() -> LlamaForCausalLM:
    return tiny_llama(64, max_position_embeddings=128, tie_word_embeddings=True)


@pytest.fixture(scope="module")
def tiny_model() -> LlamaForCausalLM:
    return _tiny()


def test_attention_bias_is_causal_within_group_or_parent() -> None:
    # A packed row: shared prompt (group 1), two completions (groups 2 and 3), one pad.
    group_ids = torch.tensor([[1, 1, 2, 2, 3, -1]])
    parent_ids = torch.tensor([[1, 1, 1, 1, 1, -1]])
    bias = training.attention_bias(group_ids, parent_ids)
    assert bias.shape == (1, 1, 6, 6)
    allowed = (bias[0, 0] == 0).int().tolist()
    assert allowed == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 0, 0, 1, 0],  # the second completion sees the prompt, not the first one
        [0, 0, 0, 0, 0, 1],  # a pad sees only pads (never a fully masked row)
    ]
    assert bias[0, 0, 0, 1] == NEG_INF


def test_attention_bias_takes_the_given_dtype() -> None:
    ids = torch.tensor([[1, 1, 2]])
    bias = training.attention_bias(ids, torch.ones_like(ids), dtype=torch.bfloat16)
    assert bias.dtype == torch.bfloat16
    assert bias[0, 0, 0, 1] == torch.finfo(torch.bfloat16).min  # finite: no inf arithmetic


def test_a_bf16_model_gets_a_bf16_mask() -> None:
    # CUDA's memory-efficient SDPA refuses a bias whose dtype is not the query's: the
    # mask each decoder layer receives must be in the model's dtype (fp32 before).
    model = tiny_llama(64).bfloat16()
    seen: list[torch.dtype] = []

    def record(_module: object, _args: object, kwargs: dict[str, object]) -> None:
        mask = kwargs.get("attention_mask")
        assert isinstance(mask, torch.Tensor)
        seen.append(mask.dtype)

    model.model.layers[0].register_forward_pre_hook(record, with_kwargs=True)
    ids = torch.tensor([[3, 4, 5, 6]])
    groups = torch.tensor([[1, 1, 2, 2]])
    with torch.no_grad():
        logprobs, _ = training.compute_logprobs(
            model, ids, torch.arange(4)[None], groups, torch.ones_like(groups)
        )
    assert seen == [torch.bfloat16]
    assert logprobs.dtype == torch.float32  # the log-softmax is fp32 whatever the model's


def test_shifted_targets_point_at_the_next_token() -> None:
    assert training.shifted_targets(torch.tensor([[4, 5, 6]])).tolist() == [[5, 6, 0]]


def test_trim_padding_drops_all_pad_columns() -> None:
    packed = {
        "tokens": torch.tensor([[1, 2, 3, 0, 0], [4, 5, 0, 0, 0]]),
        "group_ids": torch.tensor([[7, 7, 7, -1, -1], [8, 8, -1, -1, -1]]),
        "pixel_values": [None, None],
    }
    trimmed = training.trim_padding(packed)  # type: ignore[arg-type]
    assert trimmed["tokens"].tolist() == [[1, 2, 3], [4, 5, 0]]
    assert trimmed["pixel_values"] == [None, None]


def test_chunked_logprobs_equal_a_plain_forward(tiny_model: LlamaForCausalLM) -> None:
    tokens = torch.randint(1, 64, (1, 11))
    positions = torch.arange(11).unsqueeze(0)
    ones = torch.ones_like(tokens)
    with torch.no_grad():
        mine, entropy = training.compute_logprobs(
            tiny_model, tokens, positions, ones, ones, chunk_size=4
        )
        logits = tiny_model(input_ids=tokens).logits
    expected = torch.log_softmax(logits, -1)[0, :-1].gather(-1, tokens[0, 1:, None])[:, 0]
    torch.testing.assert_close(mine[0, :-1], expected, atol=1e-5, rtol=1e-5)
    assert entropy.shape == tokens.shape and bool((entropy > 0).all())


def test_packed_rows_score_like_separate_sequences(tiny_model: LlamaForCausalLM) -> None:
    # ART shares the prompt minus its last token; each completion repeats that token.
    prompt, a, b = [3, 9, 12, 5], [20, 21, 22], [30, 31]
    row = [*prompt[:-1], prompt[-1], *a, prompt[-1], *b, 0, 0]
    group_ids = [1] * 3 + [2] * 4 + [3] * 3 + [-1] * 2
    parent_ids = [1] * 10 + [-1] * 2
    input_pos = [0, 1, 2, 3, 4, 5, 6, 3, 4, 5, 0, 0]
    with torch.no_grad():
        packed, _ = training.compute_logprobs(
            tiny_model,
            torch.tensor([row]),
            torch.tensor([input_pos]),
            torch.tensor([group_ids]),
            torch.tensor([parent_ids]),
        )
        alone_b = _single(tiny_model, prompt + b)
        alone_a = _single(tiny_model, prompt + a)
    # Position t scores token t+1: b's tokens are scored at row positions 7 and 8.
    torch.testing.assert_close(packed[0, 7:9], alone_b[3:5], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(packed[0, 2:6], alone_a[2:6], atol=1e-5, rtol=1e-5)


def _single(model: LlamaForCausalLM, tokens: list[int]) -> torch.Tensor:
    ids = torch.tensor([tokens])
    same = torch.ones_like(ids)
    return training.compute_logprobs(model, ids, torch.arange(len(tokens))[None], same, same)[0][0]


def test_lora_defaults_follow_art() -> None:
    config = training.lora_config()
    assert (config.r, config.lora_alpha, config.lora_dropout) == (8, 16, 0.0)
    assert sorted(config.target_modules or ()) == sorted(training.LORA_TARGET_MODULES)
    optimizer = training.make_optimizer([torch.nn.Parameter(torch.zeros(1))])
    assert optimizer.defaults["betas"] == (0.9, 0.99)
    assert optimizer.defaults["weight_decay"] == 0.1


def test_train_configs_from_local_backend_kwargs() -> None:
    config, dev = train_config.build_train_configs(1e-5, {"loss_fn": "ppo", "epsilon": 0.1})
    assert config.learning_rate == 1e-5
    assert dev["ppo"] is True and dev["epsilon"] == 0.1
    config, dev = train_config.build_train_configs(
        1e-5, {"normalize_advantages": False, "grad_accumulation_sequences": 4, "verbose": True}
    )
    assert dev["scale_rewards"] is False
    assert config.grad_accumulation_sequences == 4
    with pytest.raises(TypeError, match="unsupported"):
        train_config.build_train_configs(1e-5, {"learning_rat": 1.0})
    with pytest.raises(ValueError):
        train_config.build_train_configs(1e-5, {"loss_fn": "dpo"})


def test_top_p_keeps_the_smallest_head_reaching_p() -> None:
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.25, 0.25, 0.25, 0.25]])
    filtered = top_p_filter(probs, torch.tensor([0.7, 1.0]))
    torch.testing.assert_close(filtered[0], torch.tensor([0.625, 0.375, 0.0, 0.0]))
    torch.testing.assert_close(filtered[1], probs[1])


def test_left_pad_pads_on_the_left_only_when_shorter() -> None:
    cache = torch.ones(2, 1, 3, 2)
    padded = _left_pad(cache, 5)
    assert padded.shape == (2, 1, 5, 2)
    assert padded[:, :, :2].abs().sum() == 0 and bool((padded[:, :, 2:] == 1).all())
    assert _left_pad(cache, 3) is cache
    assert _left_pad(torch.ones(2, 2, dtype=torch.long), 3, dim=1).tolist() == [[0, 1, 1]] * 2


def test_checkpoints_are_saved_found_and_pruned(tmp_path: Path) -> None:
    peft_model = get_peft_model(_tiny(), training.lora_config(rank=2))
    optimizer = training.make_optimizer([p for p in peft_model.parameters() if p.requires_grad])
    assert checkpoints.latest_step(tmp_path) == 0
    for step in (0, 1, 2):
        checkpoints.save_checkpoint(peft_model, tmp_path, step, optimizer.state_dict())
    # Leftovers of an interrupted save never count as a step.
    (tmp_path / "checkpoints" / ".tmp-0003-x").mkdir()
    (tmp_path / "checkpoints" / "0004").mkdir()  # no adapter inside: incomplete
    assert checkpoints.checkpoint_steps(tmp_path) == [0, 1, 2]
    assert checkpoints.latest_step(tmp_path) == 2
    saved = checkpoints.checkpoint_dir(tmp_path, 2)
    assert saved.name == "0002" and (saved / "adapter_model.safetensors").is_file()
    assert checkpoints.load_optimizer_state(saved) is not None
    assert checkpoints.delete_checkpoints(tmp_path, {2}) == [0, 1]
    assert checkpoints.checkpoint_steps(tmp_path) == [2]


def test_thread_counts_stay_within_the_machine() -> None:
    assert training_threads(3) == 3  # configured wins
    assert 1 <= training_threads() <= available_cores()
    assert default_num_threads() == max(1, available_cores() - 1)
    busy = cores_busy_elsewhere(0.05)
    assert busy is None or busy >= 0.0
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_a_core_busy_only_for_a_moment_does_not_cost_training_a_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from artfleet_trainer.torch_backend import worker

    looks = iter([1.0, 1.0, 0.1])  # vLLM's worker polling for a second after its last request
    monkeypatch.setattr(worker, "cores_busy_elsewhere", lambda: next(looks))
    assert worker.training_threads(settle_s=60) == available_cores()
    monkeypatch.setattr(worker, "cores_busy_elsewhere", lambda: 1.0)  # busy for good
    assert worker.training_threads(settle_s=0) == default_num_threads()
