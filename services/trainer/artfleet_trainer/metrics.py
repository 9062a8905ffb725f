"""Trainer metrics (Prometheus naming); the overview and trainer dashboards read these."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from artfleet.v1 import common_pb2 as pb

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
TRAJECTORIES = Counter("artfleet_trainer_trajectories_total", "Trajectories trained on")


def observe_step(summary: pb.StepSummary) -> None:
    CURRENT_STEP.set(summary.step)
    STEP_REWARD.set(summary.reward_mean)
    STEP_LOSS.set(summary.loss)
    STEP_SECONDS.observe(summary.step_seconds)
    TRAJECTORIES.inc(summary.trajectories)
