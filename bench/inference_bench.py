"""vLLM (the inference service) against the torch backend's built-in server, one run.

    python bench/inference_bench.py [--rounds 2] [--requests 64] [--max-tokens 48]
        [--publishes 5] [--demo-steps 2] [--parts serving,demo] [--demo-runs torch,vllm,...]

Both serve SmolLM2-135M-Instruct with rank-8 LoRA checkpoints (fixed seeds, the size the
demo trains). Measured on this machine (`uptime` printed beside each figure: the cores are
shared):
- serving: the demo's rollout load (`--requests` concurrent single-turn chat completions
  of at most `--max-tokens` tokens, temperature 0.7, logprobs and token ids on), servers
  alternating per round; time to the first token of turn 8 of a shell-agent episode with
  vLLM's prefix caching on and off; policy publishing (checkpoint saved → first token
  from it, `--publishes` new checkpoints each, the median; each server answers one chat
  completion before: its first renders the chat template) in each way a checkpoint can
  reach vLLM: merged from memory (vLLM's worker merges the factors: the CPU default),
  merged through a written model folder (the way before), a runtime LoRA (the GPU
  default; its rollout throughput too, the reason it is not the CPU default);
- demo: the demo's job (`artfleet demo`'s spec, `--demo-steps` steps, without its
  held-out evaluations) on a local fleet per `--demo-runs` (the torch server; vLLM as
  set by default; vLLM with merged folders on disk, the way before; vLLM with every core
  for its worker), one after the other: the mean step time of each.

Last lines: `policy_publish_s_<way>=` for each way and `policy_publish_s=` (the CPU
default's), `vllm_vs_torch_rollout_speedup=` (target >= 1.25), `vllm_turn8_ttft_speedup=`,
`demo_step_vllm_vs_torch=` (vLLM's mean step time over the torch server's; target <= 1.0).
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

from artfleet.runtime.service import free_port
from artfleet_cli.fleet import vllm_python

NAME, PROJECT = "bench", "bench"
PROMPTS = [f"What is {a} + {b}? Answer with the number." for a in range(8) for b in range(8)]


def make_checkpoints(art: Path, count: int) -> list[Path]:
    """`count` rank-8 LoRAs (non-zero B, seeds 0, 1, ...) in the trainer's layout, as
    checkpoints 1..count: each publish brings weights vLLM has not served yet."""
    import torch
    from peft import get_peft_model

    from artfleet_trainer.torch_backend.model_loader import load_base_model
    from artfleet_trainer.torch_backend.training import lora_config

    model_dir = art / PROJECT / "models" / NAME
    peft = get_peft_model(load_base_model().model, lora_config(8))
    checkpoints = []
    for step in range(1, count + 1):
        torch.manual_seed(step - 1)
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.data.normal_(0, 0.01)
        ckpt = model_dir / "checkpoints" / f"{step:04d}"
        peft.save_pretrained(str(ckpt))
        checkpoints.append(ckpt)
    (model_dir / "model.json").write_text(
        json.dumps({"name": NAME, "project": PROJECT, "base_model": "smollm2-135m-instruct"})
    )
    return checkpoints


def uptime() -> str:
    """The load beside a figure: these cores are shared."""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


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
                            return await self.warm()
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.5)
        raise TimeoutError("inference not ready")

    async def warm(self) -> None:
        """One chat completion of the base model: a server's first one renders its chat
        template and warms its tokenizer (seconds here), which is no publish's cost."""
        client = AsyncOpenAI(base_url=f"{self.url}/v1", api_key=self.token)
        await client.chat.completions.create(
            model="smollm2-135m-instruct",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=1,
        )
        await client.close()

    async def publish(self, ckpt: Path, step: int) -> float:
        """Checkpoint saved → the first token of an answer from it."""
        started = time.monotonic()
        headers = {"Authorization": f"Bearer {self.token}"}
        body = {"name": NAME, "step": step, "checkpoint": str(ckpt)}
        async with (
            aiohttp.ClientSession() as s,
            s.post(f"{self.url}/artfleet/v1/policies", json=body, headers=headers) as reply,
        ):
            assert reply.status == 200, await reply.text()
        client = AsyncOpenAI(base_url=f"{self.url}/v1", api_key=self.token)
        await client.chat.completions.create(
            model=f"{NAME}@{step}", messages=[{"role": "user", "content": "hi"}], max_tokens=1
        )
        await client.close()
        return time.monotonic() - started

    async def publish_all(self, checkpoints: list[Path], way: str) -> float:
        """Each checkpoint in turn (steps 1..n); the median seconds, each one printed."""
        seconds = []
        for step, ckpt in enumerate(checkpoints, 1):
            seconds.append(await self.publish(ckpt, step))
            print(f"publish {way} step {step}: {seconds[-1]:.2f}s ({uptime()})", flush=True)
        return statistics.median(seconds)

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
    parts = set(args.parts.split(","))
    if "serving" in parts:
        await serving(args)
    if "demo" in parts and args.demo_steps:
        await asyncio.to_thread(demo_comparison, args.demo_steps, args.demo_runs.split(","))


async def serving(args: argparse.Namespace) -> None:
    art = Path(tempfile.mkdtemp(prefix="inference-bench-art-"))
    token = secrets.token_urlsafe(16)
    checkpoints = await asyncio.to_thread(make_checkpoints, art, args.publishes)
    started: list[Inference] = []

    async def inference(**env: str) -> Inference:
        server = Inference(art, token, **env)
        started.append(server)
        await server.ready()
        return server

    try:
        await measure(args, art, token, checkpoints, inference)
    finally:
        for server in started:
            server.stop()


async def measure(
    args: argparse.Namespace, art: Path, token: str, checkpoints: list[Path], inference: Any
) -> None:
    model = f"{NAME}@{len(checkpoints)}"  # the latest: what the torch server loads
    backend, _, torch_url = await torch_server(art, token)
    merged = await inference(ARTFLEET_INFERENCE_MERGE_PATH="memory")
    publish = {"merged_memory": await merged.publish_all(checkpoints, "merged_memory")}
    times: dict[str, list[float]] = {"torch": [], "vllm": []}
    tokens: dict[str, list[int]] = {"torch": [], "vllm": []}
    for r in range(args.rounds):
        order = [("torch", torch_url), ("vllm", f"{merged.url}/v1")]
        for label, url in order if r % 2 == 0 else order[::-1]:
            seconds, n = await rollout_load(url, token, model, args.requests, args.max_tokens)
            times[label].append(seconds)
            tokens[label].append(n)
            print(f"round {r + 1} {label}: {seconds:.1f}s, {n} tokens, {n / seconds:.1f} tok/s "
                  f"({uptime()})", flush=True)  # fmt: skip
    ttft_torch = await turn8_ttft(torch_url, token, model, args.turns)
    ttft_on = await turn8_ttft(f"{merged.url}/v1", token, model, args.turns)
    merged.stop()
    await backend.close()
    # The way before (a merged folder written and reloaded), on the prefix-cache-off server.
    off = await inference(
        ARTFLEET_INFERENCE_PREFIX_CACHING="false", ARTFLEET_INFERENCE_MERGE_PATH="disk"
    )
    publish["merged_disk"] = await off.publish_all(checkpoints, "merged_disk")
    ttft_off = await turn8_ttft(f"{off.url}/v1", token, model, args.turns)
    off.stop()
    lora = await inference(ARTFLEET_INFERENCE_POLICY_MODE="lora")
    publish["lora"] = await lora.publish_all(checkpoints, "lora")
    lora_s, lora_n = await rollout_load(
        f"{lora.url}/v1", token, model, args.requests, args.max_tokens
    )
    print(f"lora: {lora_s:.1f}s, {lora_n} tokens, {lora_n / lora_s:.1f} tok/s ({uptime()})")
    lora.stop()
    report(args, times, tokens, (lora_s, lora_n), (ttft_torch, ttft_on, ttft_off), publish)


def report(
    args: argparse.Namespace,
    times: dict[str, list[float]],
    tokens: dict[str, list[int]],
    lora: tuple[float, int],
    ttft: tuple[float, float, float],
    publish: dict[str, float],
) -> None:
    torch_s, vllm_s = statistics.median(times["torch"]), statistics.median(times["vllm"])
    rate = {k: sum(tokens[k]) / sum(times[k]) for k in times}
    lora_rate = lora[1] / lora[0]
    ttft_torch, ttft_on, ttft_off = ttft
    print(
        f"torch server: {torch_s:.1f}s ({rate['torch']:.1f} tok/s); vLLM merged: {vllm_s:.1f}s "
        f"({rate['vllm']:.1f} tok/s); vLLM lora: {lora[0]:.1f}s ({lora_rate:.1f} tok/s)"
    )
    print(
        f"turn {args.turns} ttft: torch {ttft_torch:.3f}s, vLLM prefix cache on "
        f"{ttft_on:.3f}s, off {ttft_off:.3f}s"
    )
    print(f"uptime: {uptime()}")
    for way, seconds in publish.items():
        print(f"policy_publish_s_{way}={seconds:.2f}")
    print(f"publish_memory_vs_disk={publish['merged_memory'] / publish['merged_disk']:.2f}")
    print(f"vllm_merged_tokens_per_s={rate['vllm']:.1f}")
    print(f"vllm_lora_tokens_per_s={lora_rate:.1f}")
    print(f"vllm_lora_vs_merged_tokens_per_s={lora_rate / rate['vllm']:.2f}")
    print(f"vllm_vs_torch_rollout_tokens_per_s={rate['vllm'] / rate['torch']:.2f}")
    print(f"vllm_vs_torch_turn8_ttft_speedup={ttft_torch / ttft_on:.2f}")
    print(f"vllm_vs_torch_rollout_speedup={torch_s / vllm_s:.2f}")
    print(f"vllm_turn8_ttft_speedup={ttft_off / ttft_on:.2f}")
    print(f"policy_publish_s={publish['merged_memory']:.2f}")


def demo_steps(engine: str, steps: int, settings: dict[str, str]) -> list[Any]:
    """The demo's job (its spec and seed, no held-out evaluations) on a fresh local fleet;
    its step summaries."""
    from artfleet.specs.job import spec_to_proto
    from artfleet.v1 import trainer_pb2
    from artfleet_cli.client import trainer
    from artfleet_cli.demo import demo_spec
    from artfleet_cli.fleet import LocalFleet

    spec = demo_spec(steps, 8, 8, 1, 7, learning_rate=5e-4, eval_temperature=0.0)
    spec = spec.model_copy(update={"eval_every_steps": 0})
    workdir = Path(tempfile.mkdtemp(prefix=f"inference-bench-demo-{engine}-"))
    fleet = LocalFleet(workdir, engine=engine, settings=settings)
    try:
        fleet.start(timeout_s=900)
        with trainer(fleet.trainer_target, fleet.token) as stub:
            job = stub.SubmitJob(trainer_pb2.SubmitJobRequest(spec=spec_to_proto(spec)))
            for _ in stub.WatchJob(trainer_pb2.WatchJobRequest(job_id=job.id)):
                pass
            job = stub.GetJob(trainer_pb2.GetJobRequest(job_id=job.id))
    finally:
        fleet.stop()
    if len(job.steps) != steps:
        raise RuntimeError(f"demo on {engine}: {len(job.steps)} of {steps} steps ({job.error})")
    for s in job.steps:
        print(
            f"demo {engine} {settings or ''} step {s.step}: {s.step_seconds:.1f}s (rollouts "
            f"{s.rollout_seconds:.1f}s, train {s.train_seconds:.1f}s) ({uptime()})",
            flush=True,
        )
    return list(job.steps)


DEMO_RUNS = {
    "torch": ("torch", {}),
    "vllm": ("vllm", {}),  # the defaults: merged, from memory
    "vllm_disk": ("vllm", {"ARTFLEET_INFERENCE_MERGE_PATH": "disk"}),  # the way before
    # vLLM's CPU worker keeps one core for its scheduler by default: here, half the machine.
    "vllm_all_cores": ("vllm", {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}),
}


def demo_comparison(steps: int, runs: list[str]) -> None:
    """The demo's step in each of `runs` (DEMO_RUNS), one fleet after the other."""
    mean = {}
    for label in runs:
        engine, settings = DEMO_RUNS[label]
        done = demo_steps(engine, steps, settings)
        mean[label] = statistics.mean(s.step_seconds for s in done)
        print(f"demo_step_s_{label}={mean[label]:.1f}", flush=True)
    for label in mean:
        if label != "torch" and "torch" in mean:
            suffix = "" if label == "vllm" else label.removeprefix("vllm")
            print(f"demo_step_vllm{suffix}_vs_torch={mean[label] / mean['torch']:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--publishes", type=int, default=5)
    parser.add_argument("--demo-steps", type=int, default=2)
    parser.add_argument("--parts", default="serving,demo", help="serving, demo or both")
    parser.add_argument("--demo-runs", default="torch,vllm,vllm_disk", help=", ".join(DEMO_RUNS))
    asyncio.run(main(parser.parse_args()))
