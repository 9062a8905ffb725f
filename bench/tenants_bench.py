"""Tenants benchmark: many LoRA tenants on one base (torch backend, SmolLM2-135M-Instruct).

    python bench/tenants_bench.py [--tenants 8] [--repeats 5] [--steps 2] [--skip-fleet]
        [--skip-memory] [--engine vllm|torch]

1. Memory, in this process: the resident set (VmRSS, after a collection and malloc_trim)
   with one tenant that has trained a step (its AdamW state allocated), then with
   `--tenants` of ranks 8 and 16 in turns, each trained one step. A tenant's own bytes are
   its adapter, gradient and two AdamW moments (fp32: 16 bytes a LoRA parameter), counted
   from its tensors. `tenant_memory_ratio_8=` is RSS(8) / RSS(1) (target <= 1.1 plus the
   tenants' own bytes: `tenant_memory_ratio_8_less_own=` takes those out); each private
   base would add `base_mib=`.
2. Step time: one tenant's GRPO step (2 groups x 4 rollouts of 96 tokens: the fixed batch
   of train_step_bench.py) on the shared base beside the others, against the same step on
   a backend where it is alone; a warm-up each, then `--repeats` alternating, medians.
   `shared_vs_private_step_ratio=` (target <= 1.05).
3. Jobs side by side, on a real local fleet (redis-server, Celery worker, sandbox, reward,
   trainer, the policy served by `--engine`: vLLM by default, as `fleet up` serves it):
   two equal jobs one after the other, then two together (the trainer runs up to 2 at once
   on a CPU). `two_jobs_vs_sequential=` is the wall time
   together / one after the other (target <= 0.9 here, where rollouts and training share
   two cores; on a GPU the device idles while rollouts run and the other job's step fills
   that time, so the gain is larger).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from train_step_bench import fixed_groups

from artfleet_trainer.backends.art_compat import art
from artfleet_trainer.torch_backend import TorchBackend
from artfleet_trainer.torch_backend.model_loader import DEFAULT_MODEL_NAME

MiB = 1024**2


def rss_bytes() -> int:
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def _model(name: str, rank: int) -> art.TrainableModel:
    return art.TrainableModel(
        name=name,
        project="bench",
        base_model=DEFAULT_MODEL_NAME,
        _internal_config=art.dev.InternalModelConfig(
            peft_args=art.dev.PeftArgs(r=rank, lora_alpha=2 * rank)
        ),
    )


def own_bytes(backend: TorchBackend, model: art.TrainableModel) -> int:
    """Adapter + gradient + AdamW's two moments, fp32."""
    return sum(p.numel() * 16 for p in backend.peft_model_of(model).parameters())


async def memory_and_steps(args: argparse.Namespace) -> None:
    shared = TorchBackend(path=tempfile.mkdtemp(prefix="tenants-bench-"))
    first = _model("t0", 8)
    rss_empty = rss_bytes()
    await shared.register_model(first)
    groups = fixed_groups(shared.tokenizer_of(first), 2, 4, 96)
    await shared.train(first, groups, learning_rate=1e-5)
    rss_one = rss_bytes()
    tenants = [first]
    for n in range(1, args.tenants):
        model = _model(f"t{n}", 8 if n % 2 == 0 else 16)
        await shared.register_model(model)
        await shared.train(model, groups, learning_rate=1e-5)
        tenants.append(model)
    rss_many = rss_bytes()
    others = sum(own_bytes(shared, m) for m in tenants[1:])
    print(f"base_loads={shared.bases.loads} tenants={len(tenants)}")
    print(f"rss_empty_mib={rss_empty / MiB:.0f} rss_1_mib={rss_one / MiB:.0f}")
    print(f"rss_{len(tenants)}_mib={rss_many / MiB:.0f} others_own_mib={others / MiB:.1f}")
    print(f"base_mib={(rss_one - rss_empty) / MiB:.0f}", flush=True)

    private = TorchBackend(path=tempfile.mkdtemp(prefix="tenants-bench-private-"))
    alone = _model("alone", 8)
    await private.register_model(alone)
    subject = tenants[args.tenants // 2]  # a tenant in the middle, among the others

    async def step(backend: TorchBackend, model: art.TrainableModel) -> float:
        started = time.perf_counter()
        await backend.train(model, groups, learning_rate=1e-5)
        return time.perf_counter() - started

    await step(private, alone)  # warm-up (the shared side warmed up above)
    times: dict[str, list[float]] = {"shared": [], "private": []}
    for repeat in range(args.repeats):
        order = ["shared", "private"] if repeat % 2 == 0 else ["private", "shared"]
        for side in order:
            seconds = await (step(shared, subject) if side == "shared" else step(private, alone))
            times[side].append(seconds)
            print(f"repeat={repeat} {side}_s={seconds:.2f}", flush=True)
    await private.close()
    await shared.close()
    shared_s, private_s = (statistics.median(times[s]) for s in ("shared", "private"))
    ratio = rss_many / rss_one
    print(f"shared_step_s={shared_s:.2f} private_step_s={private_s:.2f}")
    print(f"tenant_memory_ratio_{len(tenants)}_less_own={(rss_many - others) / rss_one:.3f}")
    print(f"tenant_memory_ratio_{len(tenants)}={ratio:.3f}")
    print(f"shared_vs_private_step_ratio={shared_s / private_s:.3f}", flush=True)


def two_jobs(args: argparse.Namespace) -> None:
    from artfleet.runtime.rpc.client import sync_channel
    from artfleet.specs.job import JobSpecModel, spec_to_proto
    from artfleet.v1 import common_pb2 as pb
    from artfleet.v1 import trainer_pb2, trainer_pb2_grpc
    from artfleet_cli.fleet import LocalFleet

    base: dict[str, Any] = dict(
        steps=args.steps, groups_per_step=2, rollouts_per_group=2, max_turns=2,
        max_tokens=40, learning_rate=1e-4, seed=7,
    )  # fmt: skip

    def run(stub: trainer_pb2_grpc.TrainerStub, names: list[str]) -> float:
        started = time.monotonic()
        jobs = [
            stub.SubmitJob(
                trainer_pb2.SubmitJobRequest(
                    spec=spec_to_proto(JobSpecModel.model_validate({**base, "name": name}))
                )
            )
            for name in names
        ]
        for job in jobs:
            for _ in stub.WatchJob(trainer_pb2.WatchJobRequest(job_id=job.id), timeout=3600):
                pass
            ended = stub.GetJob(trainer_pb2.GetJobRequest(job_id=job.id))
            if ended.state != pb.JOB_STATE_SUCCEEDED:
                raise RuntimeError(f"{job.spec.name}: {pb.JobState.Name(ended.state)}")
            steps = " ".join(
                f"step={s.step}:{s.step_seconds:.1f}s(train {s.train_seconds:.1f}s)"
                for s in ended.steps
            )
            print(f"{job.spec.name} {steps}", flush=True)
        return time.monotonic() - started

    fleet = LocalFleet(Path(tempfile.mkdtemp(prefix="tenants-bench-fleet-")), engine=args.engine)
    fleet.start(timeout_s=900)
    try:
        with sync_channel(fleet.trainer_target, fleet.token) as channel:
            stub = trainer_pb2_grpc.TrainerStub(channel)
            run(stub, ["warmup"])  # first-use costs (imports, the sandbox image) not counted
            sequential = run(stub, ["seq-a"]) + run(stub, ["seq-b"])
            together = run(stub, ["both-a", "both-b"])
    finally:
        fleet.stop()
    print(f"sequential_s={sequential:.1f} together_s={together:.1f}")
    print(f"two_jobs_vs_sequential={together / sequential:.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tenants", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2, help="steps of each fleet job")
    parser.add_argument("--skip-fleet", action="store_true")
    parser.add_argument("--skip-memory", action="store_true", help="only the fleet's figure")
    parser.add_argument("--engine", default="vllm", choices=["vllm", "torch"])
    args = parser.parse_args()
    if not args.skip_memory:
        asyncio.run(memory_and_steps(args))
    if not args.skip_fleet:
        two_jobs(args)


if __name__ == "__main__":
    main()
