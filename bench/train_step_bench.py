"""Training-step benchmark: the torch backend's `train` against plain HF + peft.

    python bench/train_step_bench.py [--groups 2] [--rollouts 4] [--tokens 96] [--repeats 5]
        [--threads N] [--activation-budget BYTES] [--device cuda]

A fixed batch of GRPO groups (SmolLM2-135M-Instruct chat prompts, assistant answers of
`--tokens` tokens with their token ids as vLLM returns them, rewards 0..n-1) is trained
(a) by `TorchBackend.train` (ART's tokenization and packing, the 4-D packed mask, chunked
logprobs, ART's loss, the activation-memory plan, checkpoint save: everything a step does)
and (b) by a plain HF + peft loop on the same packed tokens: one forward with full logits,
log-softmax, an advantage-weighted policy-gradient loss, backward, grad clip, AdamW step.
Both start from the same LoRA weights (same LoRA config), in the same precision (the
backend's dtype for the device), on the same device and number of torch threads. One
warm-up step of each is not counted; then the order alternates per repeat and the median
of each is kept. Wall time on a shared machine moves with the neighbours' load, so the
process CPU time of each step is reported too (`train_step_cpu_ratio`; with `--threads 1`
it is the work done).

Last lines: `train_step_ratio=` (median wall, ours / plain; target <= 1.15),
`train_step_cpu_ratio=`, `ours_s=`, `plain_s=`, `ours_cpu_s=`, `plain_cpu_s=`, `tokens=`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from typing import Any

import torch
from openai.types.chat.chat_completion import Choice, ChoiceLogprobs
from openai.types.chat.chat_completion_message import ChatCompletionMessage
from openai.types.chat.chat_completion_token_logprob import ChatCompletionTokenLogprob
from peft import get_peft_model
from peft.utils import set_peft_model_state_dict

from artfleet_trainer.backends.art_compat import art
from artfleet_trainer.torch_backend import TorchBackend, train_config, training
from artfleet_trainer.torch_backend.model_loader import DEFAULT_MODEL_NAME, load_base_model

TASK = "Task: list the files in /work/app, find the failing test and fix the code."


def answer(tokenizer: Any, ids: list[int]) -> Choice:
    """An assistant turn as the policy server returns it: token ids as logprob entries."""
    content = [
        ChatCompletionTokenLogprob(token=f"token_id:{i}", logprob=-1.0, bytes=None, top_logprobs=[])
        for i in ids
    ]
    return Choice(
        index=0,
        finish_reason="stop",
        message=ChatCompletionMessage(role="assistant", content=tokenizer.decode(ids[:-1])),
        logprobs=ChoiceLogprobs(content=content),
    )


def fixed_groups(
    tokenizer: Any,
    groups: int,
    rollouts: int,
    tokens: int,
    id_range: tuple[int, int] = (200, 40000),
) -> list[Any]:
    """`groups` x `rollouts` trajectories with answers of `tokens` random ids in `id_range`."""
    generator = torch.Generator().manual_seed(0)
    eos = int(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    out = []
    for g in range(groups):
        trajectories = []
        for r in range(rollouts):
            ids = torch.randint(*id_range, (tokens - 1,), generator=generator).tolist()
            messages: list[Any] = [
                {"role": "system", "content": "You are a careful shell agent."},
                {"role": "user", "content": f"{TASK} (scenario {g})"},
            ]
            trajectories.append(
                art.Trajectory(
                    messages_and_choices=[*messages, answer(tokenizer, [*ids, eos])],
                    reward=float(r),
                )
            )
        out.append(art.TrajectoryGroup(trajectories))
    return out


def plain_step(model: Any, optimizer: torch.optim.Optimizer, packed: Any) -> None:
    """Plain HF + peft on the packed rows: full logits, PG loss, backward, clip, step."""
    params = [p for p in model.parameters() if p.requires_grad]
    device = params[0].device
    model.train()
    optimizer.zero_grad(set_to_none=True)
    rows = packed["tokens"].shape[0]
    for row in range(rows):

        def take(key: str, row: int = row) -> torch.Tensor:
            return packed[key][row : row + 1].to(device)

        tokens = take("tokens")
        mask = training.attention_bias(
            take("group_ids"), take("parent_ids"), dtype=training.model_dtype(model)
        )
        logits = model(
            input_ids=tokens, attention_mask=mask, position_ids=take("input_pos")
        ).logits.float()
        logprobs = torch.log_softmax(logits[:, :-1], dim=-1)
        new = logprobs.gather(-1, tokens[:, 1:].unsqueeze(-1)).squeeze(-1)
        weights = take("assistant_mask")[:, 1:].float()
        advantages = take("advantages")[:, 1:].float()
        loss = -(advantages * new * weights).sum() / weights.sum().clamp(min=1)
        (loss / rows).backward()
    torch.nn.utils.clip_grad_norm_(params, training.MAX_GRAD_NORM)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    model.eval()


async def run(args: argparse.Namespace) -> None:
    workdir = tempfile.mkdtemp(prefix="train-step-bench-")
    budget = (
        {}
        if args.activation_budget is None
        else {"activation_budget_bytes": args.activation_budget}
    )
    backend = TorchBackend(
        path=workdir,
        device=args.device,
        num_threads=args.threads,
        train_num_threads=args.threads,
        **budget,
    )
    model: art.TrainableModel = art.TrainableModel(
        name="bench", project="bench", base_model=DEFAULT_MODEL_NAME
    )
    await backend.register_model(model)
    ours_model = backend.peft_model_of(model)
    # A second copy of the base weights, in the backend's dtype and on its device.
    loaded = load_base_model(DEFAULT_MODEL_NAME, device=args.device, dtype=backend.dtype)
    plain = get_peft_model(loaded.model, training.lora_config(8)).eval()
    # the same starting LoRA weights (ours is a tenant's adapter on the shared base)
    set_peft_model_state_dict(plain, ours_model.adapter_state())
    lora = [m.peft_config["default"].to_dict() for m in (ours_model, plain)]
    same_lora = ("r", "lora_alpha", "lora_dropout", "target_modules")
    assert all(lora[0][k] == lora[1][k] for k in same_lora), "different LoRA configs"
    optimizer = training.make_optimizer([p for p in plain.parameters() if p.requires_grad])
    for group in optimizer.param_groups:
        group["lr"] = 1e-5
    groups = fixed_groups(loaded.tokenizer, args.groups, args.rollouts, args.tokens)
    _, dev_config = train_config.build_train_configs(1e-5, {})
    batch = training.pack_trajectory_groups(loaded.tokenizer, groups, dev_config, max_context=8192)
    assert batch is not None, "the fixed batch has nothing to train on"
    packed = batch.tensors
    n_tokens = int((packed["group_ids"] != -1).sum())
    dtypes = {next(ours_model.parameters()).dtype, next(plain.parameters()).dtype}
    print(f"rows={packed['tokens'].shape[0]} width={packed['tokens'].shape[1]} tokens={n_tokens}")
    print(f"threads={args.threads} dtypes={sorted(str(d) for d in dtypes)}")

    async def step(side: str) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        if side == "ours":
            await backend.train(model, groups, learning_rate=1e-5)
        else:
            await backend.run_on_torch_thread(plain_step, plain, optimizer, packed)
        return time.perf_counter() - wall, time.process_time() - cpu

    for side in ("ours", "plain"):  # warm-up: first-call allocations, lazy inits
        wall, cpu = await step(side)
        print(f"warmup {side}_s={wall:.2f} {side}_cpu_s={cpu:.2f}", flush=True)
    times: dict[str, list[tuple[float, float]]] = {"ours": [], "plain": []}
    for repeat in range(args.repeats):
        for side in ["ours", "plain"] if repeat % 2 == 0 else ["plain", "ours"]:
            wall, cpu = await step(side)
            times[side].append((wall, cpu))
            print(f"repeat={repeat} {side}_s={wall:.2f} {side}_cpu_s={cpu:.2f}", flush=True)
    await backend.close()
    wall_of = {side: statistics.median(w for w, _ in t) for side, t in times.items()}
    cpu_of = {side: statistics.median(c for _, c in t) for side, t in times.items()}
    print(f"ours_s={wall_of['ours']:.2f}")
    print(f"plain_s={wall_of['plain']:.2f}")
    print(f"ours_cpu_s={cpu_of['ours']:.2f}")
    print(f"plain_cpu_s={cpu_of['plain']:.2f}")
    print(f"tokens={n_tokens}")
    print(f"train_step_cpu_ratio={cpu_of['ours'] / cpu_of['plain']:.2f}")
    print(f"train_step_ratio={wall_of['ours'] / wall_of['plain']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--device", default="cpu", help="torch device of both sides")
    parser.add_argument(
        "--activation-budget",
        type=int,
        default=None,
        help="TorchBackend(activation_budget_bytes=...); default: the backend's own",
    )
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
