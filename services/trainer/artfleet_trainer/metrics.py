"""Trainer metrics (Prometheus naming); the overview and trainer dashboards read these."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from artfleet.v1 import common_pb2 as pb
from artfleet_trainer.jobs.mismatch import FIGURES

MISMATCH_FIGURES = FIGURES[1:]  # all but the token count

JOBS_RUNNING = Gauge("artfleet_trainer_jobs_running", "Jobs being trained now")
JOBS_FINISHED = Counter(
    "artfleet_trainer_jobs_finished_total", "Jobs ended, by outcome", ["outcome"]
)
JOBS_SUBMITTED = Counter("artfleet_trainer_jobs_submitted_total", "Jobs accepted")
CURRENT_STEP = Gauge("artfleet_trainer_step", "Last completed training step")
STEP_REWARD = Gauge("artfleet_trainer_step_reward_mean", "Mean reward of the last step")
STEP_LOSS = Gauge("artfleet_trainer_step_loss", "Policy loss of the last step")
STEP_SECONDS = Histogram(
    "artfleet_trainer_step_seconds",
    "Wall time of a training step (rollouts + training)",
    buckets=(5, 15, 30, 60, 120, 300, 600, 1200, 3600),
)
GROUPS_REQUEUED = Counter(
    "artfleet_trainer_groups_requeued_total",
    "Groups dispatched again because the worker running them died (its lease ran out)",
)
STEPS_TRAINED = Counter(
    "artfleet_trainer_steps_trained_total",
    "Steps trained and recorded with their checkpoint (once per step: the chaos suite checks "
    "it against the job's train ledger)",
)
STEPS_DISCARDED = Counter(
    "artfleet_trainer_steps_discarded_total",
    "Checkpoints saved by a step the trainer stopped before recording: discarded on resume, "
    "the step trained again from its stored batch",
)
JOB_RESUMES = Counter(
    "artfleet_trainer_job_resumes_total",
    "Jobs taken over while RUNNING: a previous trainer died or stopped mid-job",
)
JOB_INTERRUPTIONS = Counter(
    "artfleet_trainer_job_interruptions_total",
    "Job runs interrupted by an outage (Redis, rollout service); the job resumed",
)
POLICY_WAIT_SECONDS = Counter(
    "artfleet_trainer_policy_wait_seconds_total",
    "Seconds steps waited for the policy endpoint to serve (an inference outage or restart)",
)
TRAINING = Gauge(
    "artfleet_trainer_training", "Steps in backend.train now (training, or waiting their turn)"
)
# Per gathered group, what the trainer's own process spends to get a step's groups (the
# fleet's scaling figure; docs/scaling.md): CPU from dispatch until the groups are decoded.
GATHER_CPU_SECONDS = Counter(
    "artfleet_trainer_gather_cpu_seconds_total",
    "Trainer process CPU seconds from a step's dispatch until its groups were gathered and"
    " decoded (before training; includes the built-in policy server's generation, if any)",
)
GATHERED_GROUPS = Counter(
    "artfleet_trainer_gathered_groups_total", "Groups read from step batches for training"
)
TRAJECTORIES = Counter("artfleet_trainer_trajectories_total", "Trajectories trained on")
LEARNING_RATE = Gauge("artfleet_trainer_learning_rate", "Learning rate of the last training step")
TRAINED_TOKENS = Counter(
    "artfleet_trainer_trained_tokens_total", "Tokens in the packed batches trained on"
)
TRAIN_SECONDS = Histogram(
    "artfleet_trainer_train_seconds",
    "Wall time of backend.train for one step (without rollouts)",
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800),
)
JOB_INFO = Gauge(
    "artfleet_trainer_job_info",
    "1 while a job runs, labelled with its experiment and config hash (join on job_id)",
    ["job_id", "experiment", "config_hash"],
)
EVAL = Gauge(
    "artfleet_trainer_eval",
    "Last in-training evaluation of the policy (metric: reward_mean, success_rate, avg_at_k,"
    " pass_at_k, step)",
    ["experiment", "split", "metric"],
)
GPU_MEMORY = Gauge(
    "artfleet_trainer_gpu_memory_bytes",
    "GPU memory of each visible device (kind: used, total), sampled after each step;"
    " absent without CUDA",
    ["device", "kind"],
)

# Serving the policy on inference replicas: see artfleet_trainer.serving.replicas.
INFERENCE_REPLICAS = Gauge(
    "artfleet_trainer_inference_replicas",
    "Inference replicas behind ARTFLEET_INFERENCE_URL, by state (serving, quarantined)",
    ["state"],
)
REPLICA_QUARANTINES = Counter(
    "artfleet_trainer_inference_replica_quarantines_total",
    "Inference replicas taken out of service (a failed publish or check), by replica",
    ["replica"],
)
POLICY_PUBLISH_SECONDS = Histogram(
    "artfleet_trainer_policy_publish_seconds",
    "A saved checkpoint published to every inference replica in service and verified",
    buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64),
)

# Asynchronous steps (max_steps_off_policy): see artfleet_trainer.jobs.pipeline.
POLICY_STALENESS = Histogram(
    "artfleet_trainer_policy_staleness",
    "Policy versions between the policy that sampled a trained trajectory and the model"
    " trained on it (0 = on-policy)",
    buckets=(0, 1, 2, 3, 4, 6, 8),
)
STALE_GROUPS = Counter(
    "artfleet_trainer_stale_groups_total",
    "Groups sampled more than max_steps_off_policy versions behind the trained model,"
    " run again instead of trained on",
)
IDLE_SECONDS = Histogram(
    "artfleet_trainer_idle_seconds",
    "Per step, the seconds one side waited for the other (side=trainer: waiting for"
    " rollouts; side=rollout: training ran with no group left to roll out)",
    ["side"],
    buckets=(0.1, 1, 5, 15, 30, 60, 120, 300, 600, 1800),
)

# Sampler/trainer logprob mismatch (artfleet_trainer.jobs.mismatch; StepSummary.mismatch).
MISMATCH = Gauge(
    "artfleet_trainer_mismatch",
    "Last step's trainer-vs-sampler logprob figures over its trained tokens, by the engine"
    " that sampled (figure: abs_delta_mean, abs_delta_p99, k3, ratio_p1, ratio_p50,"
    " ratio_p99, outside_0_9_1_1, outside_0_5_2)",
    ["engine", "figure"],
)
MISMATCH_TOKENS = Counter(
    "artfleet_trainer_mismatch_tokens_total",
    "Trained tokens with a sampler logprob, compared with the trainer's",
    ["engine"],
)
MISMATCH_WARNINGS = Counter(
    "artfleet_trainer_mismatch_warnings_total",
    "Steps whose mismatch was past ARTFLEET_MISMATCH_WARN_OUTSIDE_SHARE or _K3",
    ["engine"],
)


def observe_step(summary: pb.StepSummary) -> None:
    CURRENT_STEP.set(summary.step)
    STEP_REWARD.set(summary.reward_mean)
    STEP_LOSS.set(summary.loss)
    STEP_SECONDS.observe(summary.step_seconds)
    TRAJECTORIES.inc(summary.trajectories)
    if summary.HasField("mismatch"):
        observe_mismatch(summary.mismatch)


def observe_mismatch(m: pb.SamplerMismatch) -> None:
    for figure in MISMATCH_FIGURES:
        MISMATCH.labels(m.engine, figure).set(getattr(m, figure))
    MISMATCH_TOKENS.labels(m.engine).inc(m.tokens)
    if m.warning:
        MISMATCH_WARNINGS.labels(m.engine).inc()


def observe_train(train_metrics: Mapping[str, Any], learning_rate: float, seconds: float) -> None:
    """What one `backend.train` call did; `train_metrics` is ART's `TrainResult.metrics`."""
    LEARNING_RATE.set(float(train_metrics.get("learning_rate", learning_rate)))
    TRAINED_TOKENS.inc(max(0.0, float(train_metrics.get("tokens", 0.0))))
    TRAIN_SECONDS.observe(seconds)
    sample_gpu_memory()


def observe_eval(experiment: str, summary: pb.EvalSummary) -> None:
    for name in ("reward_mean", "success_rate", "avg_at_k", "pass_at_k", "step"):
        EVAL.labels(experiment, summary.split, name).set(float(getattr(summary, name)))


def sample_gpu_memory() -> None:
    # Device-wide numbers (mem_get_info), not this process's allocator: on the art backend
    # vLLM and the trainer share the GPU. Only when torch is already loaded: never import it.
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return
    for index in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(index)
        GPU_MEMORY.labels(str(index), "used").set(total - free)
        GPU_MEMORY.labels(str(index), "total").set(total)


# The Tinker-compatible API's training clients (tinker_api/), by run id.
TINKER_CLIENTS = Gauge("artfleet_tinker_clients_loaded", "Tinker API training clients in memory")
TINKER_CALLS = Counter(
    "artfleet_tinker_calls_total",
    "Tinker API calls run, by operation and outcome",
    ["op", "outcome"],
)
TINKER_LOSS = Gauge(
    "artfleet_tinker_loss_per_token",
    "A Tinker API run's last forward_backward: its loss sum over the datums' tokens",
    ["run"],
)
TINKER_TOKENS = Counter(
    "artfleet_tinker_tokens_total", "Tokens through a Tinker API run's forward_backward", ["run"]
)
TINKER_OPTIM_STEPS = Counter(
    "artfleet_tinker_optim_steps_total", "optim_step calls applied, by Tinker API run", ["run"]
)
TINKER_STEP_SECONDS = Histogram(
    "artfleet_tinker_step_seconds",
    "Wall time from a Tinker API run's optim_step to its next (its forward_backward calls "
    "and the step itself)",
    buckets=(0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)
