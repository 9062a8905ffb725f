"""Thinking on or off per job (`enable_thinking`): the spec field, its proto round trip, and
every way a GroupTask is built (a job's steps and evals, `rollout run`/`eval run`, the HTTP
API's rollout and training bodies) carries it; unset stays unset all the way."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from artfleet.contracts.errors import InvalidArgument
from artfleet.specs.job import config_hash, spec_from_proto, spec_to_proto, validate_spec
from artfleet.v1 import rollout_pb2
from artfleet_api.mapping import train_spec
from artfleet_api.models import RolloutRequest, TrainRequest
from artfleet_cli import jobs
from artfleet_cli.main import app
from artfleet_cli.rollout import build_task
from artfleet_trainer.jobs import scheduling


@pytest.mark.parametrize("value", [None, True, False])
def test_the_proto_round_trip_keeps_it_and_unset_stays_unset(value: bool | None) -> None:
    data = {} if value is None else {"enable_thinking": value}
    spec = validate_spec(data)
    message = spec_to_proto(spec)
    assert message.HasField("enable_thinking") is (value is not None)
    assert spec_from_proto(message) == spec
    assert spec_from_proto(message).enable_thinking is value


def test_it_is_a_bool_and_changes_what_the_job_trains() -> None:
    with pytest.raises(InvalidArgument, match="enable_thinking"):
        validate_spec({"enable_thinking": "sometimes"})
    hashes = {config_hash(validate_spec({"enable_thinking": v})) for v in (None, True, False)}
    assert len(hashes) == 3


def _tasks(data: dict[str, Any], **kwargs: Any) -> list[rollout_pb2.GroupTask]:
    return scheduling.group_tasks(
        validate_spec(data),
        owner="j",
        step=1,
        scenarios=["s"],
        rollouts=2,
        policy="a@0",
        base_url="u",
        **kwargs,
    )


def test_a_jobs_group_tasks_and_its_evals_carry_it() -> None:
    (off,) = _tasks({"enable_thinking": False})
    assert off.HasField("enable_thinking") and off.enable_thinking is False
    # An evaluation builds its tasks with the same function (its own temperature).
    (on,) = _tasks({"enable_thinking": True}, temperature=0.0)
    assert on.enable_thinking is True
    (unset,) = _tasks({})
    assert not unset.HasField("enable_thinking")


def test_the_cli_and_the_http_api_carry_it() -> None:
    assert build_task(validate_spec({"enable_thinking": False}), "s").HasField("enable_thinking")
    assert not build_task(validate_spec({}), "s").HasField("enable_thinking")
    (flag,) = [f for f in jobs.DERIVED_FLAGS if f.key == "enable_thinking"]
    assert flag.name == "enable-thinking" and flag.kind is bool
    request = TrainRequest(model_name="a", project="p", use_ruler=False, enable_thinking=False)
    assert train_spec(request, _api_settings(), agent="terminal").enable_thinking is False
    assert RolloutRequest(model_name="a", project="p").enable_thinking is None


def _api_settings() -> Any:
    from artfleet_api.settings import ApiSettings

    return ApiSettings(api_token="t" * 32)  # type: ignore[arg-type]


@pytest.mark.parametrize("command", [["rollout", "run"], ["eval", "run"]])
def test_rollout_and_eval_run_take_the_flag(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "--enable-thinking" in result.output and "--no-enable-thinking" in result.output
