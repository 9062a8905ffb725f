"""The Tinker-compatible API's overhead: a training step and a sample through it against
the same work done natively, on one torch backend (SmolLM2-135M-Instruct).

    python bench/tinker_bench.py [--groups 2] [--rollouts 4] [--tokens 96] [--repeats 5]
        [--samples 64] [--max-tokens 32]

One process holds a TorchBackend, the trainer's `TinkerApi` service on a gRPC server and
the API service's app on uvicorn (real HTTP and gRPC, port 0). The fixed GRPO batch of
bench/train_step_bench.py is trained alternately
(a) natively: `TorchBackend.train` (ART's tokenization, packing and loss, one step) and
(b) through the API: the same tokenized trajectories as datums (`importance_sampling`
over exactly the sampled tokens) in one `forward_backward`, then `optim_step`, each over
HTTP and answered through its future, as the SDK does (0.18.2's JSON bodies).
Each side has its own LoRA on the same base weights. Then `--samples` sequences are drawn
through `asample` and, alternately, by one `/v1/completions` request to the same server.
One warm-up of each is not counted; medians are reported.

Last lines: `tinker_vs_native_step_ratio=` (target <= 1.15), `tinker_sample_ratio=`
(target <= 1.2), `native_step_s=`, `tinker_step_s=`, `direct_sample_s=`, `tinker_sample_s=`.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import httpx
import uvicorn
from pydantic import SecretStr

sys.path.insert(0, str(Path(__file__).parent))
from train_step_bench import fixed_groups

from artfleet.v1 import tinker_api_pb2_grpc
from artfleet_api.app import create_app
from artfleet_api.settings import ApiSettings
from artfleet_trainer.backends.art_compat import art
from artfleet_trainer.settings import TrainerSettings
from artfleet_trainer.tinker_api.service import TinkerApiService
from artfleet_trainer.torch_backend import TorchBackend, train_config, training
from artfleet_trainer.torch_backend.model_loader import DEFAULT_MODEL_NAME

TOKEN = "bench-token"
RATE = 1e-5


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def datums(tokenizer: Any, groups: list[Any]) -> list[dict[str, Any]]:
    """The batch's tokenized trajectories as Tinker datums (JSON): position i predicts
    token i+1; the sampled tokens carry their logprobs and advantage, the rest zeros."""
    _, dev_config = train_config.build_train_configs(RATE, {})
    out = []
    for result in training.tokenize_groups(tokenizer, groups, dev_config):
        ids, mask = list(result.token_ids), list(result.assistant_mask)
        logprobs = [
            float(lp) if m and not math.isnan(lp) else 0.0
            for lp, m in zip(result.logprobs[1:], mask[1:], strict=True)
        ]
        advantages = [float(result.advantage) if m else 0.0 for m in mask[1:]]

        def tensor(values: list[Any], dtype: str) -> dict[str, Any]:
            return {"data": values, "dtype": dtype, "shape": [len(values)]}

        out.append(
            {
                "model_input": {"chunks": [{"type": "encoded_text", "tokens": ids[:-1]}]},
                "loss_fn_inputs": {
                    "target_tokens": tensor(ids[1:], "int64"),
                    "logprobs": tensor(logprobs, "float32"),
                    "advantages": tensor(advantages, "float32"),
                },
            }
        )
    return out


class Client:
    """The SDK's calls, bare: submit, then poll the future."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http
        self.seq = 0

    async def post(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        reply = await self.http.post(f"/api/v1/{route}", json=body)
        reply.raise_for_status()
        return dict(reply.json())

    async def result(self, promise: dict[str, Any]) -> dict[str, Any]:
        while True:
            body = {"request_id": promise["request_id"], "allow_metadata_only": False}
            out = await self.post("retrieve_future", body)
            if out.get("type") != "try_again":
                assert "error" not in out, out
                return out

    async def call(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.result(await self.post(route, body))


async def serve(settings: TrainerSettings, backend: TorchBackend) -> tuple[Any, Any, str]:
    service = TinkerApiService.on(settings, backend)
    server = grpc.aio.server()
    tinker_api_pb2_grpc.add_TinkerApiServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    api_settings = ApiSettings(
        api_token=SecretStr(TOKEN),
        trainer_target=f"127.0.0.1:{port}",
        redis_url=f"redis://127.0.0.1:{free_port()}/0",  # never reached
    )
    http_port = free_port()
    config = uvicorn.Config(
        create_app(api_settings), host="127.0.0.1", port=http_port, log_level="warning"
    )
    web = uvicorn.Server(config)
    task = asyncio.create_task(web.serve())
    for _ in range(600):  # uvicorn has no started event: its flag, for up to 30 s
        if web.started:
            break
        await asyncio.sleep(0.05)
    return server, (web, task), f"http://127.0.0.1:{http_port}"


async def run(args: argparse.Namespace) -> None:
    workdir = tempfile.mkdtemp(prefix="tinker-bench-")
    settings = TrainerSettings(art_path=workdir, api_token=SecretStr(TOKEN))
    backend = TorchBackend(path=workdir, api_key=TOKEN)
    model: art.TrainableModel = art.TrainableModel(
        name="native", project="bench", base_model=DEFAULT_MODEL_NAME
    )
    await backend.register_model(model)
    tokenizer = backend.tokenizer_of(model)
    groups = fixed_groups(tokenizer, args.groups, args.rollouts, args.tokens)
    batch = datums(tokenizer, groups)
    tokens = sum(len(d["loss_fn_inputs"]["target_tokens"]["data"]) for d in batch)
    print(f"datums={len(batch)} tokens={tokens}")
    grpc_server, (web, web_task), url = await serve(settings, backend)
    headers = {"X-API-Key": f"tml-{TOKEN}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=600) as http:
        api = Client(http)
        session = (await api.post("create_session", {"tags": [], "sdk_version": "bench"}))[
            "session_id"
        ]
        create = {
            "session_id": session,
            "model_seq_id": 0,
            "base_model": DEFAULT_MODEL_NAME,
            "lora_config": {"rank": 8},
        }
        model_id = (await api.call("create_model", create))["model_id"]

        async def native_step() -> None:
            await backend.train(model, groups, learning_rate=RATE)

        async def tinker_step() -> None:
            api.seq += 1
            fb = {"data": batch, "loss_fn": "importance_sampling"}
            await api.call(
                "forward_backward",
                {"model_id": model_id, "seq_id": api.seq, "forward_backward_input": fb},
            )
            api.seq += 1
            adam = {"learning_rate": RATE, "beta1": 0.9, "beta2": 0.99, "eps": 1e-8}
            await api.call(
                "optim_step", {"model_id": model_id, "seq_id": api.seq, "adam_params": adam}
            )

        steps = await alternate({"native": native_step, "tinker": tinker_step}, args.repeats)
        sampling = await http.post(
            "/api/v1/create_sampling_session",
            json={
                "session_id": session,
                "sampling_session_seq_id": 0,
                "base_model": DEFAULT_MODEL_NAME,
            },
        )
        sampler_id = sampling.json()["sampling_session_id"]
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": "Write a haiku about a fleet of ships."}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        params = {"max_tokens": args.max_tokens, "temperature": 1.0, "top_k": -1, "top_p": 1.0}
        base_url, key = await backend.sampling_endpoint()

        async def tinker_sample() -> None:
            body = {
                "sampling_session_id": sampler_id,
                "seq_id": 0,
                "num_samples": args.samples,
                "prompt": {"chunks": [{"type": "encoded_text", "tokens": list(prompt)}]},
                "sampling_params": params,
                "prompt_logprobs": False,
            }
            out = await api.call("asample", body)
            assert len(out["sequences"]) == args.samples

        async def direct_sample() -> None:
            body = {
                "model": DEFAULT_MODEL_NAME,
                "prompt": list(prompt),
                "n": args.samples,
                "max_tokens": args.max_tokens,
                "logprobs": 0,
                "return_token_ids": True,
            }
            reply = await http.post(
                f"{base_url}/completions", json=body, headers={"Authorization": f"Bearer {key}"}
            )
            reply.raise_for_status()

        samples = await alternate({"direct": direct_sample, "tinker": tinker_sample}, args.repeats)
    web.should_exit = True
    await web_task
    await grpc_server.stop(None)
    await backend.close()
    report(steps, samples)


async def alternate(sides: dict[str, Any], repeats: int) -> dict[str, float]:
    names = list(sides)
    for name in names:  # warm-up
        started = time.perf_counter()
        await sides[name]()
        print(f"warmup {name}_s={time.perf_counter() - started:.2f}", flush=True)
    times: dict[str, list[float]] = {name: [] for name in names}
    for repeat in range(repeats):
        for name in names if repeat % 2 == 0 else names[::-1]:
            started = time.perf_counter()
            await sides[name]()
            times[name].append(time.perf_counter() - started)
            print(f"repeat={repeat} {name}_s={times[name][-1]:.2f}", flush=True)
    return {name: statistics.median(t) for name, t in times.items()}


def report(steps: dict[str, float], samples: dict[str, float]) -> None:
    print(f"native_step_s={steps['native']:.3f}")
    print(f"tinker_step_s={steps['tinker']:.3f}")
    print(f"direct_sample_s={samples['direct']:.3f}")
    print(f"tinker_sample_s={samples['tinker']:.3f}")
    print(f"tinker_vs_native_step_ratio={steps['tinker'] / steps['native']:.2f}")
    print(f"tinker_sample_ratio={samples['tinker'] / samples['direct']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=32)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
