"""The job spec's `off_policy_correction:` block: validation naming the field, its default
by staleness, the proto round trip, the config hash, and the CLI's flags (exit 2)."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from artfleet.contracts.errors import InvalidArgument
from artfleet.specs.job import config_hash, spec_from_proto, spec_to_proto, validate_spec
from artfleet_cli import jobs
from artfleet_cli.main import app


@pytest.mark.parametrize(
    ("block", "field", "words"),
    [
        ({"mode": "importance"}, "off_policy_correction.mode", "must be one of"),
        ({"cap": 2.0}, "off_policy_correction.mode", "is required"),
        ({"mode": "tis", "cap": 0.5}, "off_policy_correction.cap", ">= 1.0"),
        ({"mode": "tis", "cap": "big"}, "off_policy_correction.cap", "finite number"),
        ({"mode": "none", "cap": 3.0}, "off_policy_correction.cap", "mode tis only"),
        (
            {"mode": "tis", "band_high": 3.0},
            "off_policy_correction.band_high",
            "mode sequence_mask only",
        ),
        (
            {"mode": "sequence_mask", "band_low": 2.0, "band_high": 0.5},
            "off_policy_correction.band_low",
            "below band_high",
        ),
        (
            {"mode": "sequence_mask", "band_low": 1.0, "band_high": 1.0},
            "off_policy_correction.band_low",
            "below band_high",
        ),
        (
            {"mode": "sequence_mask", "band_low": 1.1, "band_high": 3.0},
            "off_policy_correction.band_low",
            "must contain 1.0",
        ),
        ({"mode": "sequence_mask", "band_low": 0}, "off_policy_correction.band_low", "> 0"),
        ({"mode": "tis", "bound": 2}, "off_policy_correction.bound", "unknown key"),
    ],
)
def test_a_bad_block_is_refused_naming_the_field(
    block: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(InvalidArgument) as info:
        validate_spec({"off_policy_correction": block})
    assert info.value.field == field
    assert words in str(info.value)


def test_the_correction_is_set_once() -> None:
    with pytest.raises(InvalidArgument) as info:
        validate_spec(
            {
                "off_policy_correction": {"mode": "tis"},
                "grpo": {"truncated_importance_sampling": 2.0},
            }
        )
    assert info.value.field == "grpo.truncated_importance_sampling"


def test_unset_means_none_asynchronous_or_not() -> None:
    assert validate_spec({}).correction.mode == "none"
    assert validate_spec({"max_steps_off_policy": 2}).correction.mode == "none"
    chosen = validate_spec({"max_steps_off_policy": 2, "off_policy_correction": {"mode": "tis"}})
    assert (chosen.correction.mode, chosen.correction.tis_cap) == ("tis", 2.0)
    masked = validate_spec({"off_policy_correction": {"mode": "sequence_mask"}}).correction
    assert masked.band == (0.5, 2.0)
    grpo_cap = validate_spec({"grpo": {"truncated_importance_sampling": 0.5}}).correction
    assert (grpo_cap.mode, grpo_cap.tis_cap) == ("tis", 0.5)


@pytest.mark.parametrize(
    "block",
    [
        {"mode": "tis", "cap": 3.5},
        {"mode": "tis"},
        {"mode": "sequence_mask", "band_low": 0.25},
        {"mode": "none"},
    ],
)
def test_the_proto_round_trip_keeps_the_block(block: dict[str, Any]) -> None:
    spec = validate_spec({"off_policy_correction": block})
    message = spec_to_proto(spec)
    assert message.HasField("off_policy_correction")
    assert spec_from_proto(message) == spec
    assert not spec_to_proto(validate_spec({})).HasField("off_policy_correction")


def test_it_is_part_of_the_config_hash_and_a_spec_without_it_keeps_its_hash() -> None:
    plain = validate_spec({})
    # The hash of the default spec before the block existed.
    assert config_hash(plain) == "4fef5dd46dc6"
    tis = validate_spec({"off_policy_correction": {"mode": "tis"}})
    assert config_hash(tis) != config_hash(plain)


def test_the_cli_has_a_flag_per_key_and_a_bad_value_exits_2_naming_it() -> None:
    keys = {f.key: f.name for f in jobs.DERIVED_FLAGS if f.key.startswith("off_policy")}
    assert keys == {
        "off_policy_correction.mode": "correction-mode",
        "off_policy_correction.cap": "correction-cap",
        "off_policy_correction.band_low": "correction-band-low",
        "off_policy_correction.band_high": "correction-band-high",
    }
    spec = jobs.load_spec(None, {"off_policy_correction.mode": "tis", "steps": 2})
    assert spec.correction.mode == "tis"
    argv = ["jobs", "submit", "--correction-mode", "sequence_mask", "--correction-band-low", "3"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2
    assert "off_policy_correction.band_low" in result.output
