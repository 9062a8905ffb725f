"""What an agent kind's runner receives: the episode's context, and its signature.

A runner fills the trajectory (`messages_and_choices`, `tools`, `metrics`) and the
`Episode` record (`finish`, `steps`, `check_passed`, ...); `episode.run_episode` made both
and finishes them after. I/O goes only through the ports in the context.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from artfleet.contracts.art_types import art
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2
from artfleet_rollout.environments import Scenario
from artfleet_rollout.ports import Policy, RewardClient, Workspaces
from artfleet_rollout.settings import RolloutSettings


@dataclass
class EpisodeContext:
    task: rollout_pb2.GroupTask
    scenario: Scenario
    policy: Policy
    workspaces: Workspaces
    settings: RolloutSettings
    agent: str = "terminal"  # the environment's agent kind
    token: str = ""  # the fleet token (container MCP servers start in the sandbox service)
    tool_choice: Any = None  # OpenAI tool_choice for tool-calling kinds; None = not sent
    reward: RewardClient | None = None  # plugin code's score() (artfleet.clients.episode)


AgentRun = Callable[[EpisodeContext, art.Trajectory, pb.Episode], Awaitable[None]]
