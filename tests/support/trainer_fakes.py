"""Trainer-side test implementations of our interfaces: a TrainerBackend whose checkpoints
are a step counter, a scored group as a rollout worker answers it, and a rollout side that
publishes each dispatched group through the step-batch contract."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field

from artfleet.contracts.art_types import art
from artfleet.contracts.batches import StepBatches
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2


def scored(task: rollout_pb2.GroupTask) -> rollout_pb2.RunGroupResponse:
    choice = pb.Choice(
        finish_reason="stop",
        message=pb.ChatMessage(role="assistant", content="THOUGHT: done"),
        has_logprobs=True,
        logprobs=[pb.TokenLogprob(token="token_id:7", logprob=-0.5)],
    )
    items = [
        pb.MessageOrChoice(message=pb.ChatMessage(role="user", content="task")),
        pb.MessageOrChoice(choice=choice),
    ]
    group = pb.TrajectoryGroup(
        trajectories=[
            pb.Trajectory(messages_and_choices=items, reward=float(i)) for i in range(task.rollouts)
        ]
    )
    return rollout_pb2.RunGroupResponse(group=group)


@dataclass
class FakeBackend:
    """Implements TrainerBackend; its checkpoints are a step counter per model."""

    steps: dict[str, int] = field(default_factory=dict)
    trained: list[int] = field(default_factory=list)  # groups per train call
    sft_calls: list[int] = field(default_factory=list)  # trajectories per train_sft call

    async def register_model(self, model: art.TrainableModel) -> None:
        self.steps.setdefault(model.name, 0)

    async def current_step(self, model: art.TrainableModel) -> int:
        return self.steps[model.name]

    async def discard_checkpoints_after(self, model: art.TrainableModel, step: int) -> list[int]:
        saved = self.steps.get(model.name, 0)
        self.steps[model.name] = min(saved, step)
        return list(range(step + 1, saved + 1))

    async def train(
        self,
        model: art.TrainableModel,
        trajectory_groups: Iterable[art.TrajectoryGroup],
        *,
        learning_rate: float = 5e-6,
    ) -> art.types.TrainResult:
        groups = list(trajectory_groups)
        assert all(g.trajectories for g in groups)
        self.trained.append(len(groups))
        self.steps[model.name] += 1
        # As ART counts them: a group whose rewards are all equal has no advantage to train.
        sequences = sum(
            len(g.trajectories) for g in groups if len({t.reward for t in g.trajectories}) > 1
        )
        return art.types.TrainResult(
            step=self.steps[model.name], metrics={"loss": 0.5, "trained_sequences": sequences}
        )

    async def train_sft(
        self,
        model: art.TrainableModel,
        trajectories: list[art.Trajectory],
        *,
        learning_rate: float,
        batch_size: int,
        max_length: int = 0,
    ) -> AsyncIterator[dict[str, float]]:
        """Batches with a falling loss, then one checkpoint; `sft_calls` counts phases."""
        self.sft_calls.append(len(trajectories))
        batches = (len(trajectories) + batch_size - 1) // batch_size
        for i in range(batches):
            yield {"loss/train": 2.0 / (i + 1), "loss/learning_rate": learning_rate}
        self.steps[model.name] += 1

    async def close(self) -> None:
        pass


Behaviour = Callable[[rollout_pb2.GroupTask], rollout_pb2.RunGroupResponse]


class FakeRollouts:
    """ScenarioSource and Dispatcher: every enqueued group is published by a task, with
    what `behaviour` answers for it (as a rollout worker publishes its group's result)."""

    def __init__(self, batches: StepBatches, behaviour: Behaviour = scored) -> None:
        self._batches = batches
        self.behaviour = behaviour
        self.enqueued: list[str] = []  # group ids, in order
        self.tasks: list[rollout_pb2.GroupTask] = []  # the same, whole
        self._running: set[asyncio.Task[object]] = set()

    async def scenario_ids(self, environment: str, split: str) -> list[str]:
        return ["s1", "s2", "s3"]

    async def enqueue(self, tasks: Sequence[rollout_pb2.GroupTask], skip: set[str]) -> int:
        todo = [t for t in tasks if t.group_id not in skip]
        for task in todo:
            self.enqueued.append(task.group_id)
            self.tasks.append(task)
            work = self._batches.publish(
                task.job_id, task.step, task.group_id, self.behaviour(task)
            )
            running = asyncio.create_task(work)
            self._running.add(running)
            running.add_done_callback(self._running.discard)
        return len(todo)
