"""Groups of plugin episodes run as a rollout worker runs them: the group runner, the
product's OpenAI policy adapter against the torch server on a tiny random Llama (HTTP on
a free port), and the reward service's own scorers in-process."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import SecretStr
from tiny_server import serve_tiny, word_tokenizer

from artfleet.contracts import codec
from artfleet.specs.reward import RewardSpecModel, default_scorers, reward_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import reward_pb2, rollout_pb2
from artfleet_reward.servicer import RewardServicer
from artfleet_rollout.adapters import OpenAIClients
from artfleet_rollout.group import GroupRunner
from artfleet_rollout.ports import Connections, Workspaces
from artfleet_rollout.settings import RolloutSettings
from artfleet_trainer.backends.art_compat import restore_transformers_masking
from artfleet_trainer.torch_backend.worker import torch_threads

KEY = "plugin-episodes-fleet-token"
VOCAB, EOS = 64, 2
CONTEXT = 128  # the tiny model's: a longer prompt is refused (400 context_length_exceeded)
# Word-level: `w<ii>` is token i; each message is w06 <content> w03.
TEMPLATE = (
    "{% for m in messages %}w06 {{ m['content'] }} w03 {% endfor %}"
    "{% if add_generation_prompt %}w04{% endif %}"
)


@dataclass
class InProcessReward:
    """The reward service's servicer, called without its transport."""

    servicer: RewardServicer = field(default_factory=RewardServicer)
    requests: list[reward_pb2.ScoreGroupRequest] = field(default_factory=list)

    async def score(
        self, group: pb.TrajectoryGroup, episodes: Sequence[pb.Episode], spec: pb.RewardSpec
    ) -> reward_pb2.ScoreGroupResponse:
        request = reward_pb2.ScoreGroupRequest(group=group, episodes=episodes, spec=spec)
        self.requests.append(request)
        return await self.servicer.score(request)


@dataclass
class EpisodeFleet:
    port: int
    reward: InProcessReward

    async def run(
        self, environment: str, scenario_id: str, **fields: Any
    ) -> rollout_pb2.RunGroupResponse:
        """One group of `environment` (the task's limits overridden by `fields`)."""
        task = rollout_pb2.GroupTask(
            job_id="shapes-job",
            step=1,
            group_id=uuid.uuid4().hex,
            environment=environment,
            scenario_id=scenario_id,
            rollouts=2,
            max_turns=4,
            model_base_url=f"http://127.0.0.1:{self.port}/v1",
            policy="agent@1",
            temperature=0.0,
            max_tokens=12,
            max_context_tokens=CONTEXT,
            reward=reward_to_proto(RewardSpecModel(reward=default_scorers("art"))),
            seed=7,
            policy_version=1,
        )
        for name, value in fields.items():
            setattr(task, name, value)
        settings = RolloutSettings(api_token=SecretStr(KEY), model_retries=0)

        async def connect(settings: RolloutSettings) -> Connections:
            clients = OpenAIClients(settings)
            # No sandbox: these plugins open none.
            return Connections(clients, cast(Workspaces, None), self.reward, clients.close)

        runner = GroupRunner(settings, connect=connect)
        await runner.start()
        try:
            return await runner.run(task)
        finally:
            await runner.stop()


@asynccontextmanager
async def episode_fleet() -> AsyncIterator[EpisodeFleet]:
    # The plugins import ART into the process that serves the tiny model: its masking
    # patch breaks a forward pass on this transformers (art_compat).
    restore_transformers_masking()
    tokenizer = word_tokenizer(VOCAB, TEMPLATE)
    with torch_threads(1):
        async with serve_tiny(tokenizer, vocab=VOCAB, eos=EOS, key=KEY, context=CONTEXT) as port:
            yield EpisodeFleet(port, InProcessReward())


def metadata(trajectory: pb.Trajectory) -> dict[str, Any]:
    """A trajectory's metadata as plain values."""
    return dict(codec.trajectory_from_proto(trajectory).metadata)
