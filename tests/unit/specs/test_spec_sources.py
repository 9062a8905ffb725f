"""One source per spec: every front end takes the job spec's defaults and bounds from the
shared models (artfleet.specs), never from a copy. Each test fails when a front end's
default departs from the model's: the CLI's flags, the HTTP training API's body, the
rollout and eval commands, and the trainer backends' training call."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest
import typer
from pydantic import BaseModel
from repo_paths import ROOT

from artfleet.runtime.service import free_port
from artfleet.specs.grpo import GrpoModel
from artfleet.specs.job import CorrectionModel, JobSpecModel
from artfleet.specs.reward import RewardSpecModel
from artfleet.specs.sft import SftModel
from artfleet.v1 import common_pb2 as pb
from artfleet_api.mapping import train_spec
from artfleet_api.models import TrainRequest
from artfleet_api.settings import ApiSettings
from artfleet_cli import evals, jobs, rollout
from artfleet_cli.spec_flags import _flag_type
from artfleet_trainer.backends import TrainerBackend

DEFAULTS = JobSpecModel()


def _options(app: typer.Typer, command: str) -> dict[str, Any]:
    """A command's parameters by name (an app of one command is that command)."""
    cmd = typer.main.get_command(app)
    cmd = getattr(cmd, "commands", {}).get(command, cmd)
    return {p.name: p for p in cmd.params if p.name}


# ---------------------------------------------------------------- the CLI


def test_every_scalar_spec_key_is_a_submit_flag_that_defaults_through_the_model() -> None:
    options = _options(jobs.app, "submit")
    keys = {f.key for f in jobs.DERIVED_FLAGS}
    for model, prefix in ((JobSpecModel, ""), (GrpoModel, "grpo."), (SftModel, "sft.")):
        for name, field in model.model_fields.items():
            if _flag_type(field.annotation) is not None:
                assert f"{prefix}{name}" in keys, f"{prefix}{name} has no flag"
    # The spec file, and how to submit it: the only parameters written in the command.
    not_spec = {"file", "watch", "target", "token"}
    assert set(options) - not_spec == {f.param for f in jobs.DERIVED_FLAGS}
    for param, option in options.items():
        # None: an unset flag leaves the key out, and the model's default applies.
        assert param in not_spec or option.default is None, param


def test_a_derived_flag_states_the_models_default() -> None:
    for flag in jobs.DERIVED_FLAGS:
        head, _, key = flag.key.rpartition(".")
        models: dict[str, type[BaseModel]] = {
            "": JobSpecModel,
            "grpo": GrpoModel,
            "sft": SftModel,
            "off_policy_correction": CorrectionModel,
        }
        model = models[head]
        field = model.model_fields[key]
        unset = field.default is None or field.is_required()  # sft.data_path: unset until given
        assert f"default {'unset' if unset else repr(field.default)})" in flag.help
        # The help says what the key means where the model does.
        assert flag.help.startswith(field.description or ""), flag.key


def test_a_submit_without_flags_is_the_models_defaults() -> None:
    assert jobs.load_spec(None, {"learning_rate": None, "sft.epochs": None}) == DEFAULTS


@pytest.mark.parametrize(
    ("app", "command", "param", "key"),
    [
        (rollout.app, "run", "env", "environment"),
        (rollout.app, "run", "split", "split"),
        (rollout.app, "run", "rollouts", "rollouts_per_group"),
        (evals.app, "run", "env", "environment"),
        (evals.app, "run", "split", "eval_split"),
        (evals.app, "run", "k", "eval_k"),
        (evals.app, "run", "max_tasks", "eval_max_tasks"),
    ],
)
def test_rollout_and_eval_options_default_to_the_job_specs(
    app: typer.Typer, command: str, param: str, key: str
) -> None:
    assert _options(app, command)[param].default == getattr(DEFAULTS, key)


@pytest.mark.parametrize("command", ["run"])
@pytest.mark.parametrize("app", [rollout.app, evals.app])
def test_unset_sampling_options_take_the_job_specs(app: typer.Typer, command: str) -> None:
    options = _options(app, command)
    for param in ("temperature", "max_turns", "max_tokens"):
        assert options[param].default is None, param


# ---------------------------------------------------------------- the HTTP training API

# The body's fields that are job spec fields, under that API's names or ours.
TRAINING_API_SPEC_FIELDS = {
    "num_steps": "steps",
    "learning_rate": "learning_rate",
    "task_prompt": "task_prompt",
    "base_model": "base_model",
    "finetune": "finetune",
}


@pytest.mark.parametrize(("field", "key"), sorted(TRAINING_API_SPEC_FIELDS.items()))
def test_the_training_api_body_defaults_to_the_job_specs(field: str, key: str) -> None:
    assert TrainRequest.model_fields[field].default == getattr(DEFAULTS, key)


def test_a_default_training_api_job_is_the_default_job_spec(tmp_path: Path) -> None:
    down = f"127.0.0.1:{free_port()}"
    settings = ApiSettings(
        api_token="t" * 32,  # type: ignore[arg-type]
        redis_url=f"redis://{down}/0",
        trainer_target=down,
        rollout_target=down,
        reward_target=down,
        sandbox_target=down,
        trajectories_dir=str(tmp_path),
    )
    request = TrainRequest(model_name="agent", project="p", use_ruler=False)
    spec = train_spec(request, settings, agent="terminal")
    same = ("steps", "groups_per_step", "rollouts_per_group", "learning_rate", "max_turns")
    for key in (*same, "max_tokens", "task_prompt", "base_model", "environment", "finetune"):
        assert getattr(spec, key) == getattr(DEFAULTS, key), key


@pytest.mark.parametrize(
    ("field", "value"),
    [("learning_rate", 2.0), ("num_steps", 0), ("rollouts_per_group", 1), ("max_turns", 201),
     ("max_tokens", 0), ("task_prompt", "x" * 40_000), ("finetune", "partial")],
)  # fmt: skip
def test_the_training_api_body_rejects_what_the_job_spec_rejects(field: str, value: Any) -> None:
    key = TRAINING_API_SPEC_FIELDS.get(field, field)
    with pytest.raises(ValueError):
        JobSpecModel.model_validate({key: value})
    with pytest.raises(ValueError, match=field):
        TrainRequest.model_validate({"model_name": "a", "project": "p", field: value})


# ---------------------------------------------------------------- specs and the trainer


def test_the_job_spec_declares_its_reward_keys_with_the_reward_specs_fields() -> None:
    for key in ("reward", "reward_clip"):
        job, reward = JobSpecModel.model_fields[key], RewardSpecModel.model_fields[key]
        assert (job.annotation, job.default, job.default_factory) == (
            reward.annotation,
            reward.default,
            reward.default_factory,
        )
    assert DEFAULTS.reward_spec == RewardSpecModel()
    assert not issubclass(JobSpecModel, RewardSpecModel)


def test_a_backends_training_call_has_no_learning_rate_of_its_own() -> None:
    """The job spec's learning_rate is the one default: the runner always passes it."""
    parameter = inspect.signature(TrainerBackend.train).parameters["learning_rate"]
    assert parameter.default is inspect.Parameter.empty


# ---------------------------------------------------------------- the proto and the docs


@pytest.mark.parametrize(
    ("model", "message"),
    [(JobSpecModel, pb.JobSpec), (GrpoModel, pb.GrpoSpec), (SftModel, pb.SftSpec)],
)
def test_the_proto_carries_the_models_fields_under_their_names(
    model: type[BaseModel], message: Any
) -> None:
    # The proto's `reward` is the whole reward spec: its `clip` is the job spec's reward_clip.
    fields = set(model.model_fields) - {"reward_clip"}
    assert {f.name for f in message.DESCRIPTOR.fields} == fields


DOCS_TABLE = ROOT / "docs" / "cli.md"
# Words the table uses for "no value of its own here".
UNSET = {"none", "unset", "art's"}


def _cells(cell: str) -> list[str]:
    """`a` / `b`, or a, b: the cell's parts, parentheticals and backticks dropped."""
    cell = re.sub(r"\([^)]*\)", "", cell).replace("`", "")
    return [part.strip() for part in re.split(r" / |, ", cell)]


def _table_defaults() -> dict[str, str]:
    """{spec key: default as written} from the job spec table of docs/cli.md."""
    text = DOCS_TABLE.read_text()
    table = text[text.index("## Job spec") :].split("\n\n")[1]
    rows: dict[str, str] = {}
    for line in table.splitlines()[2:]:
        key_cell, default_cell = line.split(" | ")[:2]
        keys = _cells(key_cell.lstrip("| "))
        defaults = _cells(default_cell) if len(keys) > 1 else [default_cell.replace("`", "")]
        assert len(keys) == len(defaults), line
        rows.update(zip(keys, (d.strip() for d in defaults), strict=True))
    return rows


def _documented(written: str, default: Any) -> bool:
    written = re.sub(r"\s*\([^)]*\)$", "", written).strip()
    if default in (None, "") or isinstance(default, GrpoModel):
        return written.lower() in {*UNSET, ""}
    if isinstance(default, list):  # the reward: the default scorers' names, in order
        return re.findall(r"name: (\w+)", written) == [s.name for s in default]
    if isinstance(default, bool | str):
        return written == str(default)
    return float(written) == float(default)


def test_the_job_spec_table_in_the_docs_gives_the_models_defaults() -> None:
    rows = _table_defaults()
    assert set(rows) == set(JobSpecModel.model_fields), "keys missing from or extra in the table"
    wrong = {
        key: (written, getattr(DEFAULTS, key))
        for key, written in rows.items()
        if not _documented(written, getattr(DEFAULTS, key))
    }
    assert wrong == {}
