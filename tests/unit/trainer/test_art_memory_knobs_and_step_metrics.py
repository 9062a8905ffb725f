"""HUD's GPU memory knobs and a full fine-tune's flag travel from the job spec into ART's
model config, and each training step updates the trainer metrics the dashboards read."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from artfleet.contracts.errors import InvalidArgument
from artfleet.specs.job import spec_from_proto, spec_to_proto, validate_spec
from artfleet_trainer import metrics
from artfleet_trainer.jobs.runner import internal_config


def test_knobs_round_trip_through_the_proto() -> None:
    spec = validate_spec({"max_seq_length": 4096, "gpu_memory_utilization": 0.7})
    message = spec_to_proto(spec)
    assert message.max_seq_length == 4096 and message.gpu_memory_utilization == 0.7
    assert spec_from_proto(message) == spec


def test_unset_knobs_stay_unset_and_leave_arts_defaults() -> None:
    spec = validate_spec({})
    message = spec_to_proto(spec)
    assert not message.HasField("max_seq_length")
    assert not message.HasField("gpu_memory_utilization")
    assert dict(internal_config(spec_from_proto(message))) == {
        "peft_args": {"r": 8, "lora_alpha": 16, "random_state": spec.seed}
    }


def test_set_knobs_become_init_and_engine_args() -> None:
    spec = validate_spec(
        {"max_seq_length": 2048, "gpu_memory_utilization": 0.6, "lora_rank": 4, "seed": 13}
    )
    assert dict(internal_config(spec)) == {
        "peft_args": {"r": 4, "lora_alpha": 8, "random_state": 13},  # the job's LoRA init
        "init_args": {"max_seq_length": 2048},
        "engine_args": {"gpu_memory_utilization": 0.6},
    }


def test_a_full_fine_tune_sets_arts_full_finetuning_beside_the_other_init_args() -> None:
    full = internal_config(validate_spec({"finetune": "full", "max_seq_length": 2048}))
    assert full["init_args"] == {"max_seq_length": 2048, "full_finetuning": True}
    alone = internal_config(validate_spec({"finetune": "full"}))
    assert alone["init_args"] == {"full_finetuning": True}
    # A LoRA job (the default) leaves the key out: ART's own default (LoRA).
    lora = internal_config(validate_spec({"finetune": "lora", "max_seq_length": 2048}))
    assert lora["init_args"] == {"max_seq_length": 2048}
    assert "init_args" not in internal_config(validate_spec({}))


@pytest.mark.parametrize(
    "field, value", [("gpu_memory_utilization", 1.5), ("gpu_memory_utilization", 0.0),
                     ("max_seq_length", 16)]
)  # fmt: skip
def test_out_of_range_knobs_are_rejected_by_name(field: str, value: float) -> None:
    with pytest.raises(InvalidArgument) as info:
        validate_spec({field: value})
    assert info.value.field == field


def test_a_training_step_sets_learning_rate_and_counts_tokens() -> None:
    before = REGISTRY.get_sample_value("artfleet_trainer_trained_tokens_total") or 0.0
    metrics.observe_train({"tokens": 321.0, "learning_rate": 2e-5}, 5e-5, 1.5)
    assert REGISTRY.get_sample_value("artfleet_trainer_learning_rate") == 2e-5
    assert REGISTRY.get_sample_value("artfleet_trainer_trained_tokens_total") == before + 321
    metrics.observe_train({}, 5e-5, 0.5)  # a backend that reports neither
    assert REGISTRY.get_sample_value("artfleet_trainer_learning_rate") == 5e-5
    assert REGISTRY.get_sample_value("artfleet_trainer_trained_tokens_total") == before + 321
