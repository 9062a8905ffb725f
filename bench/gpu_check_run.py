"""One run of the device check (bench/gpu_check.py starts each in its own process).

A run builds one random-init model (a tiny Qwen3 on a CPU, or a Qwen3-shaped model on the
GPU; no weights travel) with a word-level tokenizer made in memory, registers it with
`TorchBackend` through the backend's loader seam, and trains fixed GRPO groups:

- `check` (cpu-tiny): one `TorchBackend.train`, then the correctness checks: loss finite,
  the LoRA changed by the learning rate, the saved adapter equals the live weights, the
  saved optimizer state loads into a fresh optimizer.
- `measure` (gpu): our full step (`TorchBackend.train`: tokenization, packing, the step,
  the checkpoint), its core (`train_on_packed` on the packed batch) and a plain peft step
  on the same packed batch (full logits, no activation plan), each after a warm-up; peak
  memory against the trainer's share; generation tokens/s at batch 64 (our engine).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer, models, pre_tokenizers
from train_step_bench import fixed_groups, plain_step
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

from artfleet.contracts.embedded_model import ensure_chat_template_and_pad
from artfleet.contracts.gpu_plan import QWEN3, QWEN3_TINY, ModelShape
from artfleet_trainer.backends.art_compat import art
from artfleet_trainer.torch_backend import (
    TorchBackend,
    checkpoints,
    precision,
    train_config,
    training,
)
from artfleet_trainer.torch_backend.model_loader import LoadedModel
from artfleet_trainer.torch_backend.rank_follower import NoServing, follow
from artfleet_trainer.torch_backend.ranks import RankGroup
from artfleet_trainer.torch_serving import generation

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"]
LEARNING_RATE = 1e-4
# bf16 and fp32 H100/H200 dense peaks (FLOP/s), for MFU; other cards report no MFU.
PEAK_FLOPS = {"H100": {"bf16": 989e12, "fp32": 67e12}, "H200": {"bf16": 989e12, "fp32": 67e12}}


def word_tokenizer(words: int) -> PreTrainedTokenizerFast:
    """ChatML specials and `words` plain words; what the chat template writes besides
    them (role names, the prompts) maps to <unk>, which is all a step needs."""
    vocab = {token: i for i, token in enumerate([*SPECIALS, *(f"w{i}" for i in range(words))])}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    raw.add_special_tokens(SPECIALS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token="<unk>"
    )
    return tokenizer


def loader_for(config: dict[str, Any], device: str, dtype: torch.dtype) -> Any:
    """TorchBackend's loader seam: a random-init model of `config`, built on the device."""

    def load(_name: str) -> LoadedModel:
        started = time.monotonic()
        torch.manual_seed(0)
        cfg = AutoConfig.for_model(**config)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
        tokenizer = word_tokenizer(min(4096, int(config["vocab_size"]) - len(SPECIALS)))
        ensure_chat_template_and_pad(tokenizer, model)
        model.eval()
        return LoadedModel(model, tokenizer, "random-init", time.monotonic() - started)

    return load


def lora_weights(peft_model: Any) -> dict[str, torch.Tensor]:
    return {
        name: param.detach().float().cpu().clone()
        for name, param in peft_model.named_parameters()
        if param.requires_grad
    }


def correctness(
    backend: TorchBackend, model: Any, before: dict[str, torch.Tensor], result: Any
) -> dict[str, Any]:
    """The checks a step must pass on any device (values for the JSON, and `ok`)."""
    peft_model = backend.peft_model_of(model)
    after = lora_weights(peft_model)
    change = max(float((after[k] - before[k]).abs().max()) for k in after)
    saved = load_file(str(Path(result.checkpoint_path) / "adapter_model.safetensors"))
    live = {k: v.float().cpu() for k, v in _adapter_state(peft_model).items()}
    saved_equal = set(saved) == set(live) and all(
        torch.equal(saved[k].float().cpu(), live[k]) for k in live
    )
    fresh = training.make_optimizer([p for p in peft_model.parameters() if p.requires_grad])
    state = checkpoints.load_optimizer_state(Path(result.checkpoint_path))
    reloaded = state is not None
    if state is not None:
        fresh.load_state_dict(state)
    loss = float(result.metrics["loss"])
    # AdamW's first step moves each weight by about the rate (m/sqrt(v) ~ 1).
    lora_ok = abs(change - LEARNING_RATE) <= 0.05 * LEARNING_RATE
    return {
        "loss": loss,
        "loss_finite": math.isfinite(loss),
        "lora_max_change": change,
        "lora_changed_by_lr": lora_ok,
        "checkpoint_equals_live": saved_equal,
        "optimizer_reloads": reloaded,
        "checkpointed_layers": result.metrics.get("checkpointed_layers"),
        "ok": math.isfinite(loss) and lora_ok and saved_equal and reloaded,
    }


def _adapter_state(peft_model: Any) -> dict[str, torch.Tensor]:
    """The adapter as saved (a tenant's view of the shared base knows its own)."""
    return dict(peft_model.adapter_state())


def _sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


async def timed(device: str, coro: Any) -> tuple[float, Any]:
    _sync(device)
    started = time.perf_counter()
    value = await coro
    _sync(device)
    return time.perf_counter() - started, value


def train_flops(config: dict[str, Any], tokens: int, width: int) -> float:
    """LoRA training FLOPs of `tokens` in rows of `width`: forward 2N, backward through the
    frozen base 2N (no weight gradients), attention 3 x 4 x layers x heads x head_dim x
    width / 2 per token (causal), the lm head's forward and backward: 4 x hidden x vocab."""
    shape = ModelShape.from_config(config)
    per_layer = sum(n_in * n_out for n_in, n_out in shape.projections())
    attention = 3 * 4 * shape.layers * shape.heads * shape.head_dim * width / 2
    return tokens * (4 * shape.layers * per_layer + attention + 4 * shape.hidden * shape.vocab)


def make_backend(spec: dict[str, Any], ranks: RankGroup | None, workdir: Path) -> TorchBackend:
    """The run's backend, its files under `workdir` (the check removes it); on ranks
    (`--world`), this rank's: the same random-init base on each (the loader seeds it),
    sharded, and serving nothing."""
    device, dtype_name = spec["device"], spec["dtype"]
    if ranks is not None:
        device = ranks.device(device)
    config = QWEN3_TINY if spec["model"] == "tiny" else QWEN3[spec["model"]]
    dtype = precision.resolve_dtype(dtype_name, device)
    if ranks is not None:
        workdir = workdir / f"rank-{ranks.rank}"
    return TorchBackend(
        path=str(workdir),
        device=device,
        dtype=dtype_name,
        num_threads=1 if device == "cpu" else None,
        train_num_threads=1 if device == "cpu" else None,
        activation_budget_bytes=spec.get("activation_budget"),
        memory_fraction=spec.get("memory_fraction", 0.0),
        loader=loader_for(config, device, dtype),
        serving=NoServing() if ranks is not None else None,
        ranks=ranks,
    )


async def run(backend: TorchBackend, spec: dict[str, Any]) -> dict[str, Any]:
    device = backend.device
    config = QWEN3_TINY if spec["model"] == "tiny" else QWEN3[spec["model"]]
    model: art.TrainableModel = art.TrainableModel(
        name="check", project="gpu-check", base_model=spec["model"]
    )
    try:
        register_s, _ = await timed(device, backend.register_model(model))
        tokenizer = backend.tokenizer_of(model)
        groups = fixed_groups(
            tokenizer,
            spec["groups"],
            spec["rollouts"],
            spec["tokens"],
            (len(SPECIALS), len(tokenizer)),
        )
        out: dict[str, Any] = {"register_s": register_s}
        if spec["mode"] == "check":
            before = lora_weights(backend.peft_model_of(model))
            # ART draws group ids and shuffles the packed rows: seeded, a run's loss is the
            # same on 1 and on N ranks up to the order of its sums
            random.seed(0)
            _, result = await timed(
                device, backend.train(model, groups, learning_rate=LEARNING_RATE)
            )
            out.update(correctness(backend, model, before, result))
            if spec.get("activation_budget") == 0:  # a budget of 0 recomputes every layer
                every = out["checkpointed_layers"] == config["num_hidden_layers"]
                out["every_layer_checkpointed"] = every
                out["ok"] = out["ok"] and every
        else:
            out.update(await measure(backend, model, groups, config, spec))
        return out
    finally:
        await backend.close()


async def measure(
    backend: TorchBackend,
    model: Any,
    groups: list[Any],
    config: dict[str, Any],
    spec: dict[str, Any],
) -> dict[str, Any]:
    device = backend.device
    peft_model, tokenizer = backend.peft_model_of(model), backend.tokenizer_of(model)
    cfg, dev = train_config.build_train_configs(LEARNING_RATE, {})
    batch = training.pack_trajectory_groups(tokenizer, groups, dev, max_context=8192)
    assert batch is not None, "the fixed groups have nothing to train on"
    packed = batch.tensors
    tokens = int((packed["group_ids"] != -1).sum())
    width = int(packed["tokens"].shape[1])
    out: dict[str, Any] = {"rows": int(packed["tokens"].shape[0]), "width": width, "tokens": tokens}

    trainable = [p for p in peft_model.parameters() if p.requires_grad]
    core_optimizer, plain_optimizer = (training.make_optimizer(trainable) for _ in range(2))
    for group in plain_optimizer.param_groups:
        group["lr"] = LEARNING_RATE

    def core() -> Any:
        return training.train_on_packed(
            peft_model,
            core_optimizer,
            packed,
            cfg,
            dev,
            activation_budget_bytes=backend.activation_budget_bytes,
            memory_fraction=backend.memory_fraction,
        )

    def plain() -> None:
        plain_step(peft_model, plain_optimizer, packed)

    sides: dict[str, Any] = {
        "full": lambda: backend.train(model, groups, learning_rate=LEARNING_RATE),
        "core": lambda: backend.run_on_torch_thread(core),
        "plain": lambda: backend.run_on_torch_thread(plain),
    }
    for side in spec["sides"]:
        await sides[side]()  # warm-up: kernels, allocator, lazy inits
        _reset_peak(device)
        seconds, value = await timed(device, sides[side]())
        out[f"{side}_s"] = seconds
        out[f"{side}_peak_gib"] = _peak_gib(device)
        if side == "core":
            out["checkpointed_layers"] = value.summary()["checkpointed_layers"]
    if "core" in spec["sides"]:
        out["tokens_per_s"] = tokens / out["core_s"]
        flops = train_flops(config, tokens, width)
        peak = _peak_flops(device, spec["dtype"])
        if peak:
            out["mfu"] = flops / out["core_s"] / peak
    if spec.get("generate"):
        out.update(await generation_rate(backend, peft_model, tokenizer, spec))
    return out


async def generation_rate(
    backend: TorchBackend, peft_model: Any, tokenizer: Any, spec: dict[str, Any]
) -> dict[str, Any]:
    """Decode tokens/s of our engine at batch `generate` (n choices of one prompt)."""
    batch, new_tokens = int(spec["generate"]), int(spec.get("generate_tokens", 64))
    params = generation.SamplingParams(n=batch, max_tokens=new_tokens, temperature=1.0, seed=0)

    def go() -> int:
        request = generation.GenerationRequest(list(range(len(SPECIALS), 200)), params)
        outputs = generation.generate_batch(
            peft_model, tokenizer, [request], stop_token_ids=frozenset(), max_context=4096
        )
        return sum(len(o.token_ids) for o in outputs[0])

    await backend.run_on_torch_thread(go)  # warm-up
    seconds, produced = await timed(spec["device"], backend.run_on_torch_thread(go))
    return {"generate_batch": batch, "generate_tokens_per_s": produced / seconds}


def _reset_peak(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats()


def _peak_gib(device: str) -> float | None:
    if torch.device(device).type != "cuda":
        return None
    return torch.cuda.max_memory_allocated() / 1024**3


def _peak_flops(device: str, dtype: str) -> float | None:
    if torch.device(device).type != "cuda":
        return None
    name = torch.cuda.get_device_name()
    return next((peaks[dtype] for card, peaks in PEAK_FLOPS.items() if card in name), None)


def main() -> None:
    spec = json.loads(sys.argv[1])
    out, workdir = Path(sys.argv[2]), Path(sys.argv[3])
    ranks = RankGroup.from_env(timeout_s=600)
    if ranks is not None:
        ranks.start(ranks.device(spec["device"]))
    backend = make_backend(spec, ranks, workdir)
    if ranks is not None and not ranks.leader:
        follow(backend, ranks)  # rank 0's model work, until it closes its backend
        return
    result = asyncio.run(run(backend, spec))
    out.write_text(json.dumps(result | ({"world": ranks.world} if ranks else {})))


if __name__ == "__main__":
    main()
