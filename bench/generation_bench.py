"""Prefix-cache benchmark of the torch backend's generation: an 8-turn agent episode.

    python bench/generation_bench.py [--turns 8] [--max-tokens 32] [--repeats 2]

SmolLM2-135M-Instruct (the embedded default, wrapped in a fresh LoRA as the server
serves it) plays a shell-agent episode: a system prompt with the tool description, then
per turn an observation as the user message and a greedy answer. The transcript is
recorded once; then the same prompts (chat-templated ids) are replayed through a
`BatchEngine` without and with a `PrefixCache`, alternating which goes first per
repeat, and the best time of each turn is kept. Time to first token is the prefill
(`admit`: the first token's distribution is ready after it); episode time is every
turn's whole generation.

Last lines: `prefix_cache_ttft_speedup=` (turn N's time to first token, without / with;
target >= 3), `prefix_cache_episode_speedup=` (the episode's generation time, without /
with), `prefill_tokens_saved_frac=` (prompt tokens taken from the cache / all prompt
tokens, with the cache) and `outputs_equal=` (ids equal and logprobs within 1e-4).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import torch
from peft import get_peft_model

from artfleet_trainer.torch_backend.model_loader import DEFAULT_MODEL_NAME, load_base_model
from artfleet_trainer.torch_backend.training import lora_config
from artfleet_trainer.torch_serving.generation import (
    BatchEngine,
    GenerationRequest,
    SamplingParams,
    SequenceOutput,
    stop_token_ids_of,
)
from artfleet_trainer.torch_serving.prefix_cache import PrefixCache

SYSTEM = (
    "You are a careful shell agent working in a Linux sandbox. Each turn, think briefly, "
    "then give exactly one command in a ```bash block. The shell keeps its working "
    "directory and variables between turns. Rules: never use interactive programs (vim, "
    "less, top); prefer short commands; read a file before editing it; when the task is "
    "done, reply with DONE on its own line. Tools: the sandbox has coreutils, grep, sed, "
    "awk, find, python3 and git. Output longer than 2000 characters is cut. Example:\n"
    "THOUGHT: I need to see the files.\n```bash\nls -la\n```\n"
    "Task: the repository in /work/app has a failing unit test in tests/test_parse.py. "
    "Find why it fails and fix the code (not the test), then run the tests again."
)


def observation(turn: int) -> str:
    lines = [f"exit_code: {turn % 2}", "stdout:"]
    lines += [
        f"-rw-r--r-- 1 agent agent {1024 + 37 * i} Nov {i + 1} file_{turn}_{i}.py" for i in range(5)
    ]
    return "\n".join(lines)


def timed_turn(
    engine: BatchEngine, prompt: list[int], params: SamplingParams
) -> tuple[float, float, SequenceOutput]:
    request = GenerationRequest(list(prompt), params)
    started = time.perf_counter()
    engine.admit([request])
    ttft = time.perf_counter() - started
    while engine.num_rows:
        engine.step()
    return ttft, time.perf_counter() - started, request.outputs[0]


def make_engine(model: Any, tokenizer: Any, cache: PrefixCache | None) -> BatchEngine:
    return BatchEngine(
        model,
        tokenizer,
        stop_token_ids=stop_token_ids_of(model.get_base_model(), tokenizer),
        max_context=int(model.get_base_model().config.max_position_embeddings),
        prefix_cache=cache,
    )


def record_transcript(
    model: Any, tokenizer: Any, turns: int, params: SamplingParams
) -> list[list[int]]:
    """Play the episode once (no cache); return each turn's prompt ids."""
    engine = make_engine(model, tokenizer, None)
    messages: list[dict[str, str]] = [{"role": "system", "content": SYSTEM}]
    prompts = []
    for turn in range(turns):
        messages.append({"role": "user", "content": observation(turn)})
        prompt = [
            int(i)
            for i in tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=True, return_dict=False
            )
        ]
        prompts.append(prompt)
        _, _, out = timed_turn(engine, prompt, params)
        messages.append({"role": "assistant", "content": out.text})
    return prompts


def replay(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    params: SamplingParams,
    cache: PrefixCache | None,
) -> tuple[list[float], list[float], list[SequenceOutput]]:
    engine = make_engine(model, tokenizer, cache)
    ttfts, totals, outs = [], [], []
    for prompt in prompts:
        ttft, total, out = timed_turn(engine, prompt, params)
        ttfts.append(ttft)
        totals.append(total)
        outs.append(out)
    return ttfts, totals, outs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    loaded = load_base_model(DEFAULT_MODEL_NAME)
    model = get_peft_model(loaded.model, lora_config(8)).eval()
    tokenizer = loaded.tokenizer
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    prompts = record_transcript(model, tokenizer, args.turns, params)
    print(f"prompt_tokens_per_turn={[len(p) for p in prompts]}")

    best: dict[str, tuple[list[float], list[float]]] = {}
    outputs: dict[str, list[SequenceOutput]] = {}
    saved_frac = 0.0
    for repeat in range(args.repeats):
        order = ["without", "with"] if repeat % 2 == 0 else ["with", "without"]
        for mode in order:
            cache = PrefixCache() if mode == "with" else None
            ttfts, totals, outs = replay(model, tokenizer, prompts, params, cache)
            if cache is not None:
                stats = cache.stats
                saved_frac = stats.tokens_saved / (stats.tokens_saved + stats.tokens_computed)
            outputs[mode] = outs
            previous = best.get(mode)
            if previous is not None:
                ttfts = [min(a, b) for a, b in zip(ttfts, previous[0], strict=True)]
                totals = [min(a, b) for a, b in zip(totals, previous[1], strict=True)]
            best[mode] = (ttfts, totals)
            print(
                f"repeat={repeat} {mode}_cache episode_s={sum(totals):.2f} "
                f"ttft_last_s={ttfts[-1]:.3f}",
                flush=True,
            )

    equal = all(
        a.token_ids == b.token_ids
        and max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)), default=0.0)
        <= 1e-4
        for a, b in zip(outputs["with"], outputs["without"], strict=True)
    )
    for mode in ("without", "with"):
        ttfts, totals = best[mode]
        print(f"{mode}_cache ttft_s per turn: {' '.join(f'{t:.3f}' for t in ttfts)}")
        median = statistics.median(totals)
        print(f"{mode}_cache episode_s={sum(totals):.2f} median_turn_s={median:.2f}")
    print(f"outputs_equal={equal}")
    print(f"prefix_cache_ttft_speedup={best['without'][0][-1] / best['with'][0][-1]:.2f}")
    print(f"prefix_cache_episode_speedup={sum(best['without'][1]) / sum(best['with'][1]):.2f}")
    print(f"prefill_tokens_saved_frac={saved_frac:.3f}")


if __name__ == "__main__":
    main()
