"""`artfleet models ...` against the real trainer servicer (gRPC, Redis): a job's LoRA
checkpoints written by the torch backend's checkpoint code on a tiny Llama; the export
loads with peft and equals the saved weights; deleting the model of a running job is
refused with a clear message; pruning keeps the newest N, the best and a running
job's latest and served checkpoints, and retires what it deleted."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
import torch
from peft import PeftModel, get_peft_model
from submit_fleet import trainer_server
from tiny_llama import tiny_llama
from typer.testing import CliRunner, Result

from artfleet.contracts.checkpoint_layout import write_best
from artfleet.specs.job import config_hash, spec_to_proto, validate_spec
from artfleet.v1 import common_pb2 as pb
from artfleet_cli.main import app
from artfleet_trainer.clients.reward_client import RewardClient
from artfleet_trainer.clients.rollouts import RolloutClient
from artfleet_trainer.jobs.store import JobStore
from artfleet_trainer.servicer import TrainerServicer
from artfleet_trainer.torch_backend import checkpoints, training

pytestmark = pytest.mark.integration
TOKEN = "models-cli-token"


async def cli(target: str, *args: str) -> Result:
    env = {"ARTFLEET_API_TOKEN": TOKEN, "COLUMNS": "200"}  # rich: no truncated cells
    runner = CliRunner()
    return await asyncio.to_thread(
        lambda: runner.invoke(app, ["models", *args, "--target", target], env=env)
    )


RETIRED: list[tuple[str, list[int]]] = []  # what the servicer told the backend to retire


async def _retire(name: str, steps: list[int]) -> None:
    RETIRED.append((name, steps))


@pytest.fixture
async def trainer(redis_url: str, tmp_path: Path) -> AsyncIterator[tuple[str, JobStore, Path]]:
    RETIRED.clear()
    client = aioredis.from_url(redis_url)
    await client.flushdb()
    store = JobStore(client)
    art_path = tmp_path / "art"
    servicer = TrainerServicer(
        store,
        RolloutClient("127.0.0.1:1", TOKEN),  # not used by the Models RPCs
        RewardClient("127.0.0.1:1", TOKEN),
        lambda backend: "",
        art_path=str(art_path),
        retire=_retire,
    )
    server = trainer_server(servicer, TOKEN, "trainer-models-test")
    await server.start()
    yield f"127.0.0.1:{server.port}", store, art_path
    await server.stop(1)
    await client.aclose()


def _base() -> torch.nn.Module:
    return tiny_llama(64, max_position_embeddings=64)


async def _job_with_checkpoints(
    store: JobStore, art_path: Path, state: int, steps: tuple[int, ...] = (1, 2)
) -> pb.Job:
    spec = validate_spec({"name": "agent", "experiment": "exp1"})
    job = await store.create(spec_to_proto(spec), config_hash=config_hash(spec))
    await store.set_state(job, state)
    output = art_path / spec.project / "models" / f"agent-{job.id}"
    peft_model = get_peft_model(_base(), training.lora_config(4))
    for step in steps:
        with torch.no_grad():  # a distinct adapter per step
            for name, param in peft_model.named_parameters():
                if "lora_B" in name:
                    param.fill_(0.01 * step)
        checkpoints.save_checkpoint(peft_model, output, step, {"state": {}, "param_groups": []})
    return job


async def test_list_show_export_loads_with_peft_and_delete(
    trainer: tuple[str, JobStore, Path], tmp_path: Path
) -> None:
    target, store, art_path = trainer
    job = await _job_with_checkpoints(store, art_path, pb.JOB_STATE_SUCCEEDED)
    name = f"agent-{job.id}"
    listed = await cli(target, "list", "--experiment", "exp1")
    assert listed.exit_code == 0, listed.output
    assert name in listed.stdout and "1, 2" in listed.stdout
    shown = await cli(target, "show", f"{name}@2")
    assert shown.exit_code == 0 and job.config_hash in shown.stdout

    out = tmp_path / "adapter"
    exported = await cli(target, "export", f"{name}@1", "--out", str(out))
    assert exported.exit_code == 0, exported.output
    files = {p.name for p in out.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors"} <= files
    assert "optimizer.pt" not in files  # training state is not exported
    loaded = PeftModel.from_pretrained(_base(), str(out))
    lora_b = [p for n, p in loaded.named_parameters() if "lora_B" in n]
    assert lora_b and all(torch.allclose(p, torch.full_like(p, 0.01)) for p in lora_b)

    again = await cli(target, "export", name, "--out", str(out))
    assert again.exit_code == 2 and "not empty" in again.stderr
    missing = await cli(target, "export", f"{name}@9", "--out", str(tmp_path / "x"))
    assert missing.exit_code == 2 and "no checkpoint 9" in missing.stderr

    # name@best: the checkpoint the job's retention marked; an error until one is marked.
    unmarked = await cli(target, "export", f"{name}@best", "--out", str(tmp_path / "b"))
    assert unmarked.exit_code == 2 and "no checkpoint marked best" in unmarked.stderr
    write_best(art_path / "artfleet" / "models" / name, 1, "pass_at_k", 1.0)
    best = await cli(target, "export", f"{name}@best", "--out", str(tmp_path / "b"))
    assert best.exit_code == 0 and "(step 1)" in best.stdout, best.output
    latest = await cli(target, "export", f"{name}@latest", "--out", str(tmp_path / "l"))
    assert latest.exit_code == 0 and "(step 2)" in latest.stdout, latest.output
    assert "1*, 2" in (await cli(target, "list")).stdout

    one = await cli(target, "delete", f"{name}@1", "--yes")
    assert one.exit_code == 0 and "[1]" in one.stdout
    assert checkpoints.checkpoint_steps(art_path / "artfleet" / "models" / name) == [2]
    retired = list(RETIRED)
    assert retired == [(name, [1])]  # served no more either
    whole = await cli(target, "delete", name, "--yes")
    assert whole.exit_code == 0, whole.output
    assert not (art_path / "artfleet" / "models" / name).exists()
    gone = await cli(target, "show", name)
    assert gone.exit_code == 2 and "no model named" in gone.stderr


async def test_deleting_the_model_of_a_running_job_is_refused(
    trainer: tuple[str, JobStore, Path],
) -> None:
    target, store, art_path = trainer
    job = await _job_with_checkpoints(store, art_path, pb.JOB_STATE_RUNNING)
    refused = await cli(target, "delete", f"agent-{job.id}", "--yes")
    assert refused.exit_code == 2
    assert f"is used by job {job.id}, which is running" in refused.stderr
    assert checkpoints.checkpoint_steps(art_path / "artfleet" / "models" / f"agent-{job.id}") == [
        1,
        2,
    ]
    bad = await cli(target, "show", "agent@x")
    assert bad.exit_code == 2 and "name@best" in bad.stderr
    best = await cli(target, "export", f"agent-{job.id}@bestest", "--out", "unused")
    assert best.exit_code == 2 and "'bestest' is not a step number" in best.stderr


async def test_prune_lists_then_deletes_all_but_the_newest_and_the_best(
    trainer: tuple[str, JobStore, Path],
) -> None:
    target, store, art_path = trainer
    job = await _job_with_checkpoints(store, art_path, pb.JOB_STATE_SUCCEEDED, (1, 2, 3, 4, 5))
    name = f"agent-{job.id}"
    folder = art_path / "artfleet" / "models" / name
    write_best(folder, 2, "pass_at_k", 0.9)

    dry = await cli(target, "prune", name, "--keep", "2")
    assert dry.exit_code == 0, dry.output
    assert f"would delete checkpoints [1, 3] of {name}" in dry.stdout and "--yes" in dry.stdout
    assert checkpoints.checkpoint_steps(folder) == [1, 2, 3, 4, 5]  # a dry run by default
    assert not RETIRED
    listed = await cli(target, "prune", name, "--keep", "2", "--json")
    assert listed.exit_code == 0, listed.output
    (plan,) = json.loads(listed.stdout)
    assert plan["dry_run"] is True
    assert {c["step"]: c["reason"] for c in plan["kept"]} == {
        2: "best",
        4: "newest 2",
        5: "newest 2",
    }
    assert [c["step"] for c in plan["deleted"]] == [1, 3]

    done = await cli(target, "prune", name, "--keep", "2", "--yes")
    assert done.exit_code == 0, done.output
    assert f"deleted checkpoints [1, 3] of {name}" in done.stdout
    assert checkpoints.checkpoint_steps(folder) == [2, 4, 5]
    retired = list(RETIRED)  # the inference service forgets them, as after retention
    assert retired == [(name, [1, 3])]
    assert "nothing to delete" in (await cli(target, "prune", name, "--keep", "2")).stdout


async def test_prune_of_a_running_job_keeps_its_latest_and_served_checkpoints(
    trainer: tuple[str, JobStore, Path],
) -> None:
    target, store, art_path = trainer
    job = await _job_with_checkpoints(store, art_path, pb.JOB_STATE_RUNNING, (1, 2, 3, 4))
    name = f"agent-{job.id}"
    job.policy = f"{name}@3"  # step 4 saved, not yet published: 3 still answers rollouts
    await store.save(job)
    done = await cli(target, "prune", name, "--keep", "0", "--yes")
    assert done.exit_code == 0, done.output
    assert checkpoints.checkpoint_steps(art_path / "artfleet" / "models" / name) == [3, 4]
    assert "running job's latest" in done.stdout and "served to the running job" in done.stdout


async def test_prune_refusals_name_the_cause(trainer: tuple[str, JobStore, Path]) -> None:
    target, store, art_path = trainer
    job = await _job_with_checkpoints(store, art_path, pb.JOB_STATE_SUCCEEDED)
    unknown = await cli(target, "prune", "agent-nobody", "--keep", "1")
    assert unknown.exit_code == 2 and "no model named 'agent-nobody'" in unknown.stderr
    negative = await cli(target, "prune", f"agent-{job.id}", "--keep", "-1")
    assert negative.exit_code == 2 and "--keep" in negative.output
    one = await cli(target, "prune", f"agent-{job.id}@1", "--keep", "1")
    assert one.exit_code == 2 and "models delete name@step" in one.stderr
    away = await cli("127.0.0.1:1", "prune", f"agent-{job.id}", "--keep", "1")
    assert away.exit_code == 1 and "cannot reach the trainer" in away.stderr
