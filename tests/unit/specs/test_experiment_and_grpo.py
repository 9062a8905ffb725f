"""Experiment identity (config hash) and the GRPO knobs of the job spec."""

from __future__ import annotations

import pytest

from artfleet.contracts.errors import InvalidArgument
from artfleet.specs.grpo import GrpoModel
from artfleet.specs.job import (
    JobSpecModel,
    config_hash,
    spec_from_proto,
    spec_to_proto,
    validate_spec,
)
from artfleet.v1 import common_pb2 as pb
from artfleet_trainer.jobs import experiment, grpo


def test_config_hash_is_stable_and_ignores_only_labels() -> None:
    base = validate_spec({})
    assert config_hash(base) == config_hash(validate_spec({}))
    assert len(config_hash(base)) == 12
    relabelled = validate_spec(
        {
            "name": "other",
            "project": "p2",
            "experiment": "cot_v1",
            "eval_every_steps": 5,
            "keep_last": 3,
            "log_sample_rate": 0.1,
        }
    )
    assert config_hash(relabelled) == config_hash(base)
    for change in ({"learning_rate": 1e-4}, {"grpo": {"scale_rewards": False}}, {"seed": 1}):
        assert config_hash(validate_spec(change)) != config_hash(base), change
    # Spelling a default out is the same config.
    assert config_hash(validate_spec({"steps": 3})) == config_hash(base)


def test_grpo_block_round_trips_through_proto_keeping_only_set_knobs() -> None:
    spec = validate_spec(
        {
            "experiment": "knobs",
            "grpo": {
                "loss_fn": "ppo",
                "advantage_balance": -0.5,
                "scale_rewards": False,
                "epsilon": 0.2,
                "epsilon_high": 0.28,
                "importance_sampling_level": "sequence",
                "kl_penalty_coef": 0.0,
            },
        }
    )
    message = spec_to_proto(spec)
    assert message.experiment == "knobs"
    assert message.grpo.HasField("kl_penalty_coef") and not message.grpo.HasField("kimi_k2_tau")
    assert spec_from_proto(message) == spec
    assert grpo.train_kwargs(spec) == {
        "loss_fn": "ppo",
        "advantage_balance": -0.5,
        "scale_rewards": False,
        "epsilon": 0.2,
        "epsilon_high": 0.28,
        "importance_sampling_level": "sequence",
        "kl_penalty_coef": 0.0,
    }
    assert grpo.train_kwargs(JobSpecModel()) == {}


@pytest.mark.parametrize(
    ("grpo_block", "field"),
    [
        ({"loss_fn": "dpo"}, "grpo.loss_fn"),
        ({"advantage_balance": 1.5}, "grpo.advantage_balance"),
        ({"epsilon": 0}, "grpo.epsilon"),
        ({"importance_sampling_level": "word"}, "grpo.importance_sampling_level"),
        ({"learning_rate": 1e-5}, "grpo.learning_rate"),
    ],
)
def test_bad_knobs_are_rejected_naming_the_field(grpo_block: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        validate_spec({"grpo": grpo_block})
    assert info.value.field == field


def test_each_backend_refuses_by_name_what_it_cannot_honour() -> None:
    torch_job = validate_spec({"grpo": {"kl_penalty_reference_step": 2}})
    with pytest.raises(InvalidArgument) as info:
        grpo.check_backend(torch_job)
    assert info.value.field == "grpo.kl_penalty_reference_step"
    assert "torch backend" in str(info.value)
    art_job = validate_spec({"backend": "art", "grpo": {"grad_accumulation_sequences": 2}})
    with pytest.raises(InvalidArgument) as info:
        grpo.check_backend(art_job)
    assert info.value.field == "grpo.grad_accumulation_sequences"
    grpo.check_backend(validate_spec({"backend": "art", "grpo": {"kl_penalty_reference_step": 2}}))


def test_every_knob_is_honoured_or_refused_by_each_backend() -> None:
    """Each GrpoModel field is a LocalBackend.train argument (or TrainConfig's), and the
    torch backend's train() takes every knob it does not refuse."""
    import inspect

    from art.local import LocalBackend

    from artfleet_trainer.torch_backend import train_config

    art_params = set(inspect.signature(LocalBackend.train).parameters)
    for name in GrpoModel.model_fields:
        assert name in art_params or name in grpo.ART_UNSUPPORTED, name
    honoured = {
        "loss_fn": "ppo",
        "normalize_advantages": False,
        "scale_rewards": True,
        "advantage_balance": 0.5,
        "epsilon": 0.2,
        "epsilon_high": 0.3,
        "kl_penalty_coef": 0.1,
        "importance_sampling_level": "sequence",
        "max_negative_advantage_importance_sampling_weight": 2.0,
        "mask_prob_ratio": True,
        "kimi_k2_tau": 1.0,
        "truncated_importance_sampling": 2.0,
        "num_trajectories_learning_rate_multiplier_power": 0.5,
        "packed_sequence_length": 512,
        "logprob_calculation_chunk_size": 128,
        "allow_training_without_logprobs": True,
        "grad_accumulation_sequences": 2,
    }
    assert set(honoured) | set(grpo.TORCH_UNSUPPORTED) == set(GrpoModel.model_fields)
    spec = validate_spec({"grpo": honoured})
    grpo.check_backend(spec)
    config, dev_config = train_config.build_train_configs(1e-5, grpo.train_kwargs(spec))
    assert dev_config["ppo"] is True
    assert dev_config["scale_rewards"] is False  # normalize_advantages: false wins, as in ART
    assert dev_config["importance_sampling_level"] == "sequence"
    assert dev_config["num_trajectories_learning_rate_multiplier_power"] == 0.5
    assert config.kl_penalty_coef == 0.1 and config.grad_accumulation_sequences == 2


def test_the_model_config_carries_the_identity() -> None:
    spec = validate_spec({"experiment": "cot_prompt_v1"})
    job = pb.Job(id="j1", config_hash=config_hash(spec))
    config = experiment.model_config(job, spec)
    assert (config.experiment, config.config_hash, config.job_id) == (
        "cot_prompt_v1",
        config_hash(spec),
        "j1",
    )
    assert config.spec["experiment"] == "cot_prompt_v1"
    config.model_dump_json()  # ART refuses a config that does not serialize


class _Splits:
    """ScenarioSource with one environment of a train split only (as RolloutClient answers)."""

    async def scenario_ids(self, environment: str, split: str) -> list[str]:
        if split != "train":
            raise InvalidArgument(f"environment {environment!r} has no split {split!r}", "split")
        return ["s1"]


async def test_a_missing_eval_split_is_refused_at_submit_by_its_name() -> None:
    from artfleet_trainer.jobs.evals import check_eval_split

    await check_eval_split(_Splits(), validate_spec({"eval_split": "nope"}))  # no eval: fine
    with pytest.raises(InvalidArgument) as info:
        await check_eval_split(_Splits(), validate_spec({"eval_every_steps": 2}))
    assert info.value.field == "eval_split" and "no split 'test'" in str(info.value)
    await check_eval_split(_Splits(), validate_spec({"eval_every_steps": 2, "eval_split": "train"}))
