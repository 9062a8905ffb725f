"""The job spec's `finetune` (lora | full): its default, validation naming the field (full
needs the torch backend and has no KL reference), the proto round trip (an old sender's ""
is the default), and the config hash (a LoRA job keeps the hash it had before the key
existed)."""

from __future__ import annotations

import pytest

from artfleet.contracts.errors import InvalidArgument
from artfleet.specs.job import config_hash, spec_from_proto, spec_to_proto, validate_spec
from artfleet.v1 import common_pb2 as pb


def test_lora_is_the_default() -> None:
    assert validate_spec({}).finetune == "lora"
    assert validate_spec({"finetune": "full"}).finetune == "full"


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"finetune": "partial"}, "must be one of"),
        ({"finetune": True}, "must be one of"),
        ({"finetune": "full", "backend": "art"}, "backend torch"),
    ],
)
def test_a_bad_value_is_refused_naming_the_field(data: dict[str, object], words: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        validate_spec(data)
    assert info.value.field == "finetune"
    assert words in str(info.value)


def test_a_full_fine_tune_with_a_kl_penalty_is_refused_naming_the_coefficient() -> None:
    with pytest.raises(InvalidArgument) as info:
        validate_spec({"finetune": "full", "grpo": {"kl_penalty_coef": 0.1}})
    assert info.value.field == "grpo.kl_penalty_coef"
    assert "no reference model" in str(info.value)
    assert validate_spec({"finetune": "lora", "grpo": {"kl_penalty_coef": 0.1}})
    assert validate_spec({"finetune": "full", "grpo": {"kl_penalty_coef": 0.0}})


def test_art_takes_lora_jobs() -> None:
    assert validate_spec({"backend": "art", "finetune": "lora"}).backend == "art"


@pytest.mark.parametrize("finetune", ["lora", "full"])
def test_the_proto_round_trip_keeps_it(finetune: str) -> None:
    spec = validate_spec({"finetune": finetune})
    message = spec_to_proto(spec)
    assert message.finetune == finetune
    assert spec_from_proto(message) == spec


def test_an_old_message_without_it_is_a_lora_job() -> None:
    old = pb.JobSpec(name="agent", steps=2)
    assert old.finetune == ""
    assert spec_from_proto(old).finetune == "lora"


def test_full_changes_the_hash_and_lora_keeps_the_old_one() -> None:
    plain = validate_spec({})
    # The hash of the default spec before the key existed.
    assert config_hash(plain) == "4fef5dd46dc6"
    assert config_hash(validate_spec({"finetune": "lora"})) == config_hash(plain)
    assert config_hash(validate_spec({"finetune": "full"})) != config_hash(plain)
