"""`artfleet rollout run`: one group of a scenario against any OpenAI-compatible endpoint,
through the rollout service (Rollout.RunGroup), scored by the reward service, no training.

The endpoint defaults to the fleet's policy (`ARTFLEET_POLICY_BASE_URL`, which `fleet up`'s
fleet.env exports), and without `--reward` a group is scored as a job of its environment
would be (`with_default_reward`: an MCP environment by its own evaluate tool)."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import typer
import yaml
from google.protobuf import json_format
from rich.table import Table

from artfleet.contracts import failures, seeds
from artfleet.contracts.errors import InvalidArgument
from artfleet.specs.base import default_of
from artfleet.specs.job import (
    JobSpecModel,
    mcp_config_json,
    reward_spec_proto,
    validate_spec,
    with_default_reward,
)
from artfleet.specs.yaml_text import DuplicateKey, load_yaml
from artfleet.v1 import rollout_pb2, rollout_pb2_grpc
from artfleet_cli import render
from artfleet_cli.client import TokenOpt, fail, service

app = typer.Typer(help="Run rollouts without training.", no_args_is_help=True)

COMPONENT_PREFIX = "reward_"  # the rollout's trajectory metric per scorer
POLICY_URL_ENV = "ARTFLEET_POLICY_BASE_URL"  # the fleet's policy endpoint (fleet.env)
BASE_URL_HELP = (
    "OpenAI-compatible endpoint as the rollout workers reach it, e.g. http://host:8000/v1; "
    f"default: the fleet's policy (${POLICY_URL_ENV}, in fleet up's fleet.env)"
)
JOB_DEFAULT = "default: the job default"

# The options `rollout run` and `eval run` share, written once.
BaseUrlOpt = typer.Option(
    None, "--base-url", envvar=POLICY_URL_ENV, help=BASE_URL_HELP, show_default=False
)
EnvOpt = typer.Option(default_of(JobSpecModel, "environment"), "--env", help="environment")
TemperatureOpt = typer.Option(None, "--temperature", help=JOB_DEFAULT)
MaxTurnsOpt = typer.Option(None, "--max-turns", help=JOB_DEFAULT)
MaxTokensOpt = typer.Option(None, "--max-tokens", help=f"per turn; {JOB_DEFAULT}")
EnableThinkingOpt = typer.Option(
    None,
    "--enable-thinking/--no-enable-thinking",
    help="the chat template's enable_thinking; default: the template's own",
)
RewardOpt = typer.Option(
    None,
    "--reward",
    help="scorers: YAML/JSON list or a file; default: the environment's, as a job's",
)
RolloutTargetOpt = typer.Option(
    "127.0.0.1:50052",
    "--target",
    envvar="ARTFLEET_ROLLOUT_TARGET",
    help="rollout service gRPC address",
)


def policy_url(base_url: str | None) -> str:
    """`--base-url`, else the fleet's policy endpoint; a usage error without either."""
    if not base_url:
        fail(f"no policy endpoint: pass --base-url or set {POLICY_URL_ENV} (source fleet.env)")
    return base_url


def parse_reward(text: str) -> list[Any]:
    """Scorers as a YAML/JSON list, given inline or as a file holding one."""
    path, source = Path(text), "--reward"
    if path.is_file():
        text, source = path.read_text(), str(path)
    try:
        loaded = load_yaml(text, source)
    except DuplicateKey as exc:
        fail(str(exc))
    except yaml.YAMLError as exc:
        fail(f"--reward is not YAML/JSON: {exc}")
    if not isinstance(loaded, list):
        fail("--reward is a list of scorers, e.g. '[{name: process}, {name: task_check}]'")
    return loaded


def job_defaults(overrides: dict[str, Any]) -> JobSpecModel:
    """The job spec's defaults and checks, so a rollout runs as a job's would."""
    try:
        return validate_spec({k: v for k, v in overrides.items() if v is not None})
    except InvalidArgument as exc:
        fail(f"invalid option: {exc}")


def pick_scenario(info: rollout_pb2.EnvironmentInfo, split: str, index: int) -> str:
    ids = [s.id for s in info.scenarios if s.split == split]
    if not ids:
        fail(f"environment {info.name!r} has no scenario in split {split!r}")
    if index >= len(ids):
        fail(f"--index {index} is out of range: split {split!r} has {len(ids)} scenarios")
    return ids[index]


def build_task(spec: JobSpecModel, scenario_id: str, **fields: Any) -> rollout_pb2.GroupTask:
    job_id = f"cli-{secrets.token_hex(4)}"
    return rollout_pb2.GroupTask(
        job_id=job_id,
        group_id=f"{job_id}-0",
        environment=spec.environment,
        scenario_id=scenario_id,
        max_turns=spec.max_turns,
        temperature=spec.temperature,
        max_tokens=spec.max_tokens,
        max_context_tokens=spec.max_context_tokens,
        reward=reward_spec_proto(spec),
        seed=seeds.group_seed(spec.seed, 0, 0),  # a group of its own: step 0, the first
        task_prompt=spec.task_prompt,
        mcp_config=mcp_config_json(spec),
        enable_thinking=spec.enable_thinking,
        **fields,
    )


def trajectories_table(response: rollout_pb2.RunGroupResponse) -> Table:
    table = Table("index", "reward", "turns", "finish", "check", "components")
    for trajectory, episode in zip(response.group.trajectories, response.episodes, strict=False):
        index = trajectory.metadata["rollout_index"].int_value
        components = ", ".join(
            f"{name.removeprefix(COMPONENT_PREFIX)}={value.float_value:.3g}"
            for name, value in sorted(trajectory.metrics.items())
            if name.startswith(COMPONENT_PREFIX)
        )
        table.add_row(
            str(index),
            f"{trajectory.reward:+.3f}",
            str(episode.turns),
            episode.finish,
            "pass" if episode.check_passed else "fail",
            components or "-",
        )
    return table


def outcome_lines(response: rollout_pb2.RunGroupResponse) -> list[str]:
    outcome, lines = response.outcome, []
    if outcome.fail_job:
        lines.append(f"reward: the job would fail: {outcome.fail_job}")
    if outcome.group_dropped:
        lines.append("reward: the group is dropped")
    if outcome.dropped:
        lines.append(f"reward: dropped trajectories {list(outcome.dropped)}")
    for f in outcome.failures:
        where = "the group" if f.trajectory < 0 else f"trajectory {f.trajectory}"
        lines.append(f"scorer {f.scorer} failed ({f.type}) on {where}: {f.message} -> {f.action}")
    for exc in response.group.exceptions:
        lines.append(f"episode failed: {failures.describe(exc)}")
    return lines


@app.command("run")
def run(
    base_url: str | None = BaseUrlOpt,
    model: str = typer.Option(..., help="model name the endpoint serves"),
    env: str = EnvOpt,
    scenario: str | None = typer.Option(None, help="scenario id (else --split and --index)"),
    split: str = typer.Option(
        default_of(JobSpecModel, "split"), help="split to pick the scenario from"
    ),
    index: int = typer.Option(0, min=0, help="scenario index within --split"),
    rollouts: int = typer.Option(default_of(JobSpecModel, "rollouts_per_group"), min=1, max=256),
    api_key_env: str = typer.Option(
        "",
        help="variable in the rollout service's environment holding the key; "
        "empty = the fleet token",
        show_default=False,
    ),
    max_turns: int | None = MaxTurnsOpt,
    temperature: float | None = TemperatureOpt,
    max_tokens: int | None = MaxTokensOpt,
    max_context_tokens: int | None = typer.Option(None, help=JOB_DEFAULT),
    enable_thinking: bool | None = EnableThinkingOpt,
    reward: str | None = RewardOpt,
    timeout_s: float = typer.Option(1800.0, min=1, help="how long to wait for the group"),
    as_json: bool = typer.Option(False, "--json", help="print the whole response as JSON"),
    target: str = RolloutTargetOpt,
    token: str = TokenOpt,
) -> None:
    """Run one group and print its trajectories, rewards and the reward outcome. Exits 1
    when no trajectory came back (every episode failed, or the reward dropped the group)."""
    base_url = policy_url(base_url)
    spec = job_defaults(
        dict(
            environment=env,
            max_turns=max_turns,
            temperature=temperature,
            max_tokens=max_tokens,
            max_context_tokens=max_context_tokens,
            enable_thinking=enable_thinking,
            reward=parse_reward(reward) if reward is not None else None,
        )
    )
    with service(target, token, "rollout service") as channel:
        stub = rollout_pb2_grpc.RolloutStub(channel)
        # Always: without --reward, the environment's agent kind picks the scorers.
        info = stub.DescribeEnvironment(
            rollout_pb2.DescribeEnvironmentRequest(name=env), timeout=30
        )
        spec = with_default_reward(spec, info.agent)
        if scenario is None:
            scenario = pick_scenario(info, split, index)
        task = build_task(
            spec,
            scenario,
            rollouts=rollouts,
            model_base_url=base_url,
            policy=model,
            model_api_key_env=api_key_env,
        )
        response = stub.RunGroup(rollout_pb2.RunGroupRequest(task=task), timeout=timeout_s)
    if as_json:
        print(json_format.MessageToJson(response, preserving_proto_field_name=True))
    else:
        render.console.print(f"group {task.group_id}: {env}/{scenario}, {model} at {base_url}")
        render.console.print(trajectories_table(response))
        for line in outcome_lines(response):
            render.console.print(line, markup=False)
    if not response.group.trajectories:
        raise SystemExit(1)
