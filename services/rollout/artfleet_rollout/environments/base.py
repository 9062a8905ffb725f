"""Environments (task sets) and their scenarios: what the agent is asked, the files it
starts with, and the check that says whether it succeeded."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from artfleet.contracts.records import BadRecords
from artfleet.v1 import rollout_pb2

from .repo_task import RepoTask

SPLITS = ("train", "test")


@dataclass(frozen=True)
class ToolCallSpec:
    """A tool the environment calls itself (HUD's `setup_tool`, `evaluate_tool`)."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class McpTask:
    """An MCP scenario: the server (HUD's `mcp_config`), its setup and evaluate calls.

    `config` holds one server: `{name: {command, args, env, cwd}}` (stdio; a `docker run`
    command starts in the sandbox service), `{name: {url, headers}}` (streamable HTTP) or
    `{docker: {image, args}}`.
    """

    config: Mapping[str, Any]
    evaluate: ToolCallSpec
    setup: ToolCallSpec | None = None


class _KeyErrorWithMessage(KeyError):
    # KeyError's str() is the repr of its argument (quotes, escaped newlines); these errors
    # reach people, so they read as plain messages.
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownEnvironment(_KeyErrorWithMessage):
    def __init__(self, name: str, known: Iterable[str]) -> None:
        super().__init__(f"unknown environment {name!r}; known: {', '.join(sorted(known))}")
        self.name = name


class UnknownScenario(_KeyErrorWithMessage):
    def __init__(self, environment: str, scenario_id: str) -> None:
        super().__init__(f"environment {environment!r} has no scenario {scenario_id!r}")
        self.scenario_id = scenario_id


class UnknownSplit(_KeyErrorWithMessage):
    def __init__(self, split: str) -> None:
        super().__init__(f"unknown split {split!r}; known: {', '.join(SPLITS)}")
        self.split = split


@dataclass(frozen=True)
class Scenario:
    """One task. `check` runs in the workspace after the episode: exit status 0 = solved."""

    id: str
    split: str
    title: str
    instruction: str
    files: dict[str, str] = field(default_factory=dict)  # relative path -> content
    check: str = ""
    image: str = ""  # container image for the Docker sandbox backend; "" = its default
    network: bool = False  # the task needs network access (the sandbox's policy decides)
    difficulty: str = ""
    system: str = ""  # the scenario's own system prompt (single-turn tasks); "" = the agent's
    answer: str = ""  # the expected answer (the answer_check scorer compares with it)
    mcp: McpTask | None = None  # the MCP agent's server and calls
    # A known-good command, used only by tests to prove the check can pass; never shown
    # to the agent (and kept out of repr so it does not leak into logs).
    solution: str = field(default="", repr=False)
    repo: RepoTask | None = None  # a repo task: hidden F2P/P2P tests run after the episode
    # OpenAI tool_choice for this task's turns (a taskset's record); None = the environment's
    tool_choice: Any = None
    # What a plugin's episode needs beyond these fields (an ART rollout function and the
    # user's own scenario object: art_environment.ArtTask); never shown or compared.
    payload: Any = field(default=None, repr=False, compare=False)


class Environment:
    """A named, fixed set of scenarios, split into train and test."""

    def __init__(
        self,
        name: str,
        description: str,
        scenarios: Iterable[Scenario],
        agent: str = "terminal",
        bad_records: BadRecords | None = None,
        tools: Sequence[str] = (),
        tool_choice: Any = None,
    ) -> None:
        # The kinds import the environments' types: read at construction, not import.
        from artfleet_rollout.agents.kinds import UnknownAgent, agent_runner

        try:
            agent_runner(agent)
        except UnknownAgent as exc:  # names the known kinds, or a broken plugin's error
            raise ValueError(f"environment {name!r}: {exc}") from None
        self.name = name
        self.description = description
        self.agent = agent
        self.tools = tuple(tools)  # tool names offered, for listings (MCP: the server's)
        self.tool_choice = tool_choice  # OpenAI tool_choice sent with every turn; None = unsent
        # Records a loader left out, located (`file:line: reason`); never a crash. The
        # trainer refuses a job over them unless it sets skip_bad_records.
        self.bad_records = bad_records or BadRecords()
        # ... and counted by named reason ("no FAIL_TO_PASS": 3).
        self.skipped: dict[str, int] = dict(self.bad_records.by_reason)
        self._scenarios = list(scenarios)
        self._by_id = {s.id: s for s in self._scenarios}
        if len(self._by_id) != len(self._scenarios):
            raise ValueError(f"environment {name!r}: scenario ids are not unique")

    def scenarios(self, split: str | None = None) -> list[Scenario]:
        """The scenarios of `split` in their fixed order; None or "" = all of them."""
        if not split:
            return list(self._scenarios)
        if split not in SPLITS:
            raise UnknownSplit(split)
        return [s for s in self._scenarios if s.split == split]

    def get(self, scenario_id: str) -> Scenario:
        try:
            return self._by_id[scenario_id]
        except KeyError:
            raise UnknownScenario(self.name, scenario_id) from None

    def split_sizes(self) -> dict[str, int]:
        return {split: len(self.scenarios(split)) for split in SPLITS}

    def describe(self) -> rollout_pb2.EnvironmentInfo:
        """The DescribeEnvironment reply: no instructions, checks or solutions, only names;
        `skipped` names the first bad records by location (BadRecords.as_skipped)."""
        return rollout_pb2.EnvironmentInfo(
            name=self.name,
            description=self.description,
            split_sizes=self.split_sizes(),
            scenarios=[
                rollout_pb2.ScenarioInfo(id=s.id, split=s.split, title=s.title, image=s.image)
                for s in self._scenarios
            ],
            agent=self.agent,
            skipped=self.bad_records.as_skipped(),
        )
