"""vLLM (the inference service) against the torch backend's built-in server, one run.

    python bench/inference_bench.py [--rounds 2] [--requests 64] [--max-tokens 48]

Both serve SmolLM2-135M-Instruct with the same rank-8 LoRA checkpoint (fixed seed, the
size the demo trains). Measured, servers alternating per round on this machine:
- the demo's rollout load: `--requests` concurrent single-turn chat completions of at
  most `--max-tokens` tokens, temperature 0.7, logprobs and token ids on (what the
  rollout asks); tokens per second of each server;
- an 8-turn shell-agent episode with a growing history (generation_bench.py's): time to
  the first token of turn 8 on vLLM with prefix caching on and off (a second vLLM);
- policy publishing: checkpoint saved → first token from it, in merged mode (the CPU
  default: weights merged and reloaded in place) and in lora mode (runtime adapter; its
  rollout throughput is measured too, as the reason for the CPU default).

Last lines: `vllm_vs_torch_rollout_speedup=` (torch time / vLLM time; target >= 1.25),
`vllm_turn8_ttft_speedup=` (prefix caching off / on), `policy_publish_s=` (merged mode).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from openai import AsyncOpenAI

sys.path.insert(0, str(Path(__file__).parent))
from generation_bench import SYSTEM, observation

from artfleet_cli.fleet import free_port, vllm_python

NAME, PROJECT = "bench", "bench"
PROMPTS = [f"What is {a} + {b}? Answer with the number." for a in range(8) for b in range(8)]


def make_checkpoint(art: Path) -> Path:
    """A rank-8 LoRA (non-zero B, seed 0) in the trainer's layout, as checkpoint 1."""
    import torch
    from peft import get_peft_model

    from artfleet_trainer.torch_backend.model_loader import load_base_model
    from artfleet_trainer.torch_backend.training import lora_config

    model_dir = art / PROJECT / "models" / NAME
    ckpt = model_dir / "checkpoints" / "0001"
    loaded = load_base_model()
    peft = get_peft_model(loaded.model, lora_config(8))
    torch.manual_seed(0)
    for name, p in peft.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.01)
    peft.save_pretrained(str(ckpt))
    (model_dir / "model.json").write_text(
        json.dumps({"name": NAME, "project": PROJECT, "base_model": "smollm2-135m-instruct"})
    )
    return ckpt


class Inference:
    """The inference service as a process (vLLM behind the front)."""

    def __init__(self, art: Path, token: str, **env: str) -> None:
        self.port = free_port()
        self.token = token
        work = Path(tempfile.mkdtemp(prefix="inference-bench-"))
        environ = {k: v for k, v in os.environ.items() if not k.startswith("ARTFLEET_")}
        environ.update(
            ARTFLEET_API_TOKEN=token, ARTFLEET_PORT=str(self.port), ARTFLEET_ART_PATH=str(art),
            ARTFLEET_INFERENCE_WORKDIR=str(work), ARTFLEET_INFERENCE_VLLM_PYTHON=vllm_python(),
            **env,
        )  # fmt: skip
        self.log = open(work / "front.log", "ab")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "artfleet_inference"], env=environ, stdout=self.log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def ready(self) -> None:
        async with aiohttp.ClientSession() as session:
            for _ in range(1200):
                if self.proc.poll() is not None:
                    raise RuntimeError(f"inference exited with {self.proc.returncode}")
                try:
                    async with session.get(f"{self.url}/health") as reply:
                        if reply.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.5)
        raise TimeoutError("inference not ready")

    async def publish(self, ckpt: Path) -> float:
        """Checkpoint saved → the first token of an answer from it."""
        started = time.monotonic()
        headers = {"Authorization": f"Bearer {self.token}"}
        body = {"name": NAME, "step": 1, "checkpoint": str(ckpt)}
        async with (
            aiohttp.ClientSession() as s,
            s.post(f"{self.url}/artfleet/v1/policies", json=body, headers=headers) as reply,
        ):
            assert reply.status == 200, await reply.text()
        client = AsyncOpenAI(base_url=f"{self.url}/v1", api_key=self.token)
        await client.chat.completions.create(
            model=f"{NAME}@1", messages=[{"role": "user", "content": "hi"}], max_tokens=1
        )
        await client.close()
        return time.monotonic() - started

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # the service stops its own vLLM (its process group)
            self.proc.wait(90)
        self.log.close()


async def rollout_load(
    base_url: str, token: str, model: str, n: int, max_tokens: int
) -> tuple[float, int]:
    client = AsyncOpenAI(base_url=base_url, api_key=token, max_retries=0, timeout=900)

    async def one(prompt: str) -> int:
        reply = await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens,
            temperature=0.7, logprobs=True, extra_body={"return_token_ids": True},
        )  # fmt: skip
        return reply.usage.completion_tokens if reply.usage else 0

    started = time.monotonic()
    tokens = await asyncio.gather(*(one(PROMPTS[i % len(PROMPTS)]) for i in range(n)))
    seconds = time.monotonic() - started
    await client.close()
    return seconds, sum(tokens)


async def turn8_ttft(base_url: str, token: str, model: str, turns: int) -> float:
    """Plays the episode greedily; returns the time to the first token of the last turn
    (a 1-token request over the whole history: the prefill and one decode step)."""
    client = AsyncOpenAI(base_url=base_url, api_key=token, max_retries=0, timeout=900)
    messages: list[Any] = [{"role": "system", "content": SYSTEM}]
    ttft = 0.0
    for turn in range(turns):
        messages.append({"role": "user", "content": observation(turn)})
        started = time.monotonic()
        await client.chat.completions.create(
            model=model, messages=messages, max_tokens=1, temperature=0
        )
        ttft = time.monotonic() - started
        reply = await client.chat.completions.create(
            model=model, messages=messages, max_tokens=32, temperature=0
        )
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    await client.close()
    return ttft


async def torch_server(art: Path, token: str) -> tuple[Any, Any, str]:
    from artfleet_trainer.backends.art_compat import art as art_module
    from artfleet_trainer.torch_backend import TorchBackend

    backend = TorchBackend(path=str(art), api_key=token)
    model: Any = art_module.TrainableModel(
        name=NAME, project=PROJECT, base_model="smollm2-135m-instruct"
    )
    await model.register(backend)
    await backend.start_serving()
    assert backend.base_url is not None
    return backend, model, backend.base_url


async def main(args: argparse.Namespace) -> None:
    if not vllm_python():
        raise SystemExit("no Python with vLLM: make install builds .venv-vllm")
    art = Path(tempfile.mkdtemp(prefix="inference-bench-art-"))
    token = secrets.token_urlsafe(16)
    ckpt = await asyncio.to_thread(make_checkpoint, art)
    started: list[Inference] = []

    async def inference(**env: str) -> Inference:
        server = Inference(art, token, **env)
        started.append(server)
        await server.ready()
        return server

    try:
        await measure(args, art, token, ckpt, inference)
    finally:
        for server in started:
            server.stop()


async def measure(
    args: argparse.Namespace, art: Path, token: str, ckpt: Path, inference: Any
) -> None:
    backend, _, torch_url = await torch_server(art, token)
    merged = await inference()
    publish_s = await merged.publish(ckpt)
    times: dict[str, list[float]] = {"torch": [], "vllm": []}
    tokens: dict[str, list[int]] = {"torch": [], "vllm": []}
    for r in range(args.rounds):
        order = [("torch", torch_url), ("vllm", f"{merged.url}/v1")]
        for label, url in order if r % 2 == 0 else order[::-1]:
            seconds, n = await rollout_load(url, token, f"{NAME}@1", args.requests, args.max_tokens)
            times[label].append(seconds)
            tokens[label].append(n)
            print(f"round {r + 1} {label}: {seconds:.1f}s, {n} tokens, {n / seconds:.1f} tok/s")
    ttft_torch = await turn8_ttft(torch_url, token, f"{NAME}@1", args.turns)
    ttft_on = await turn8_ttft(f"{merged.url}/v1", token, f"{NAME}@1", args.turns)
    merged.stop()
    await backend.close()
    off = await inference(ARTFLEET_INFERENCE_PREFIX_CACHING="false")
    await off.publish(ckpt)
    ttft_off = await turn8_ttft(f"{off.url}/v1", token, f"{NAME}@1", args.turns)
    off.stop()
    lora = await inference(ARTFLEET_INFERENCE_POLICY_MODE="lora")
    lora_publish_s = await lora.publish(ckpt)
    lora_s, lora_n = await rollout_load(
        f"{lora.url}/v1", token, f"{NAME}@1", args.requests, args.max_tokens
    )
    lora.stop()
    torch_s, vllm_s = statistics.median(times["torch"]), statistics.median(times["vllm"])
    rate = {k: sum(tokens[k]) / sum(times[k]) for k in times}
    print(
        f"torch server: {torch_s:.1f}s ({rate['torch']:.1f} tok/s); vLLM merged: {vllm_s:.1f}s "
        f"({rate['vllm']:.1f} tok/s); vLLM lora: {lora_s:.1f}s ({lora_n / lora_s:.1f} tok/s)"
    )
    print(
        f"turn {args.turns} ttft: torch {ttft_torch:.3f}s, vLLM prefix cache on "
        f"{ttft_on:.3f}s, off {ttft_off:.3f}s"
    )
    print(f"lora_mode_publish_s={lora_publish_s:.2f}")
    print(f"vllm_lora_vs_merged_tokens_per_s={(lora_n / lora_s) / rate['vllm']:.2f}")
    print(f"vllm_vs_torch_rollout_tokens_per_s={rate['vllm'] / rate['torch']:.2f}")
    print(f"vllm_vs_torch_turn8_ttft_speedup={ttft_torch / ttft_on:.2f}")
    print(f"vllm_vs_torch_rollout_speedup={torch_s / vllm_s:.2f}")
    print(f"vllm_turn8_ttft_speedup={ttft_off / ttft_on:.2f}")
    print(f"policy_publish_s={publish_s:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--turns", type=int, default=8)
    asyncio.run(main(parser.parse_args()))
