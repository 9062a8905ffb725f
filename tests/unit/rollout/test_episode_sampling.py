"""Every trajectory records the sampling settings its policy calls were sent with
(artfleet.contracts.sampling), and they reach the trainer through the trajectory codec."""

from __future__ import annotations

from pydantic import SecretStr
from rollout_fakes import SUBMIT, FakeWorkspaces, ScriptedPolicy, bash, group_task

from artfleet.contracts.art_types import art
from artfleet.contracts.codec import group_from_proto, group_to_proto
from artfleet.contracts.sampling import Sampling
from artfleet.v1 import common_pb2 as pb
from artfleet_rollout.environments import get_environment
from artfleet_rollout.episode import EpisodeContext, run_episode
from artfleet_rollout.settings import RolloutSettings

SCENARIO = get_environment("shell-tasks").get("create-hello-file")
SETTINGS = RolloutSettings(api_token=SecretStr("unit-test-token"))


async def test_an_episode_records_its_sampling_and_the_codec_carries_it() -> None:
    task = group_task(scenario_id=SCENARIO.id, rollouts=1, temperature=0.9)
    ctx = EpisodeContext(
        task, SCENARIO, ScriptedPolicy([bash("ls"), SUBMIT]), FakeWorkspaces(), SETTINGS
    )
    trajectory, _ = await run_episode(ctx, 0)
    assert Sampling.from_metadata(trajectory.metadata) == Sampling(temperature=0.9)
    assert trajectory.metadata["sampling_top_p"] == 1.0
    # Through Redis: the group's bytes, as StepBatches stores them.
    wire = group_to_proto(art.TrajectoryGroup([trajectory])).SerializeToString()
    (back,) = group_from_proto(pb.TrajectoryGroup.FromString(wire)).trajectories
    assert Sampling.from_metadata(back.metadata) == Sampling(0.9, top_p=1.0, top_k=0, min_p=0.0)


def test_a_trajectory_sampled_before_the_record_has_none() -> None:
    assert Sampling.from_metadata({"scenario_id": "s"}) is None
    assert Sampling(0.7).request_fields() == {
        "temperature": 0.7,
        "top_p": 1.0,
        "top_k": 0,
        "min_p": 0.0,
    }
