"""SFT samples: the offline-sample format and OpenAI-messages JSONL; records that cannot
be used are counted by named reason; a file with none usable is refused naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from repo_paths import FIXTURES

from artfleet.contracts.errors import InvalidArgument
from artfleet.specs.job import validate_spec
from artfleet.specs.sft import FORMAT_ALIASES, SftModel
from artfleet_trainer.sft.data import epoch_order, load_samples

OFFLINE_SAMPLES = FIXTURES / "sft" / "offline_samples.json"


def test_offline_samples_above_the_score_keep_their_conversation() -> None:
    data = load_samples(SftModel(data_path=str(OFFLINE_SAMPLES), min_score=0.5))
    assert data.records == 5
    assert len(data.samples) == 2  # tasks 1034 (1.0) and 1035 (0.8)
    assert data.skipped == {
        "no assistant turn": 1,  # 1038
        "no extra.conversation": 1,  # 1037
        "score below min_score": 1,  # 1036 (0.0)
    }
    first = data.samples[0].messages
    assert [m["role"] for m in first] == ["system", "user", "assistant", "user", "assistant"]
    assert first[2]["content"].startswith("THOUGHT: look first.")


def test_without_min_score_every_conversation_is_kept() -> None:
    data = load_samples(SftModel(data_path=str(OFFLINE_SAMPLES), format="offline"))
    assert len(data.samples) == 3
    assert data.skipped == {"no assistant turn": 1, "no extra.conversation": 1}


def test_openai_messages_jsonl_with_malformed_lines(tmp_path: Path) -> None:
    good = {
        "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
    }
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    lines = [
        json.dumps(good),
        "{not json",
        "[" * 100_000,  # nesting deeper than the parser goes
        json.dumps([1, 2]),
        json.dumps({"messages": [{"role": "robot", "content": "x"}]}),
        json.dumps({"messages": [{"role": "user", "content": ["parts"]}]}),
        json.dumps({"messages": []}),
        json.dumps({"prompt": "no messages"}),
        json.dumps({**good, "tools": tools}),
        "",
    ]
    path = tmp_path / "sft.jsonl"
    path.write_text("\n".join(lines))
    data = load_samples(SftModel(data_path=str(path), format="messages"))
    assert len(data.samples) == 2 and data.records == 9  # every non-empty line
    assert data.samples[1].tools == tools
    assert data.skipped == {
        "bad role": 1,
        "content is not text": 1,
        "empty conversation": 1,
        "no messages": 1,
        "not valid JSON": 2,
        "not a JSON object": 1,
    }
    assert [b.where for b in data.bad.first] == [f"{path}:{n}" for n in (2, 3, 4, 5, 6)]
    assert data.bad.count == 7  # the 5 first named, 2 more counted


def test_auto_reads_each_record_by_its_keys_and_max_samples_cuts(tmp_path: Path) -> None:
    seed = json.loads(OFFLINE_SAMPLES.read_text())[0]
    messages = {"messages": [{"role": "assistant", "content": "hello"}], "score": 2}
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (seed, messages, seed)))
    data = load_samples(SftModel(data_path=str(path), max_samples=2, min_score=1.0))
    assert len(data.samples) == 2 and data.skipped == {"over max_samples": 1}
    assert data.samples[1].messages == [{"role": "assistant", "content": "hello"}]


def test_missing_file_and_no_usable_sample_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument) as info:
        load_samples(SftModel(data_path=str(tmp_path / "nope.json")))
    assert info.value.field == "sft.data_path" and "no such file" in str(info.value)
    with pytest.raises(InvalidArgument) as info:
        load_samples(SftModel(data_path=str(OFFLINE_SAMPLES), min_score=5.0))
    assert info.value.field == "sft.data_path"
    assert "0 of 5 records kept" in str(info.value)
    assert "5 score below min_score" in str(info.value)  # score is checked first
    with pytest.raises(InvalidArgument) as info:
        load_samples(SftModel(data_path=str(tmp_path / ("x" * 300))))
    assert info.value.field == "sft.data_path" and "File name too long" in str(info.value)
    broken = tmp_path / "broken.json"
    broken.write_text("[{]")
    with pytest.raises(InvalidArgument, match="not valid JSON"):
        load_samples(SftModel(data_path=str(broken)))


def test_epochs_repeat_and_shuffle_by_seed() -> None:
    data = load_samples(SftModel(data_path=str(OFFLINE_SAMPLES)))
    spec = SftModel(data_path=str(OFFLINE_SAMPLES), epochs=3)
    order = epoch_order(data.samples, spec, seed=7)
    assert len(order) == 9
    assert order == epoch_order(data.samples, spec, seed=7)  # deterministic
    for epoch in range(3):
        assert sorted(map(id, order[epoch * 3 : epoch * 3 + 3])) == sorted(map(id, data.samples))
    plain = epoch_order(data.samples, SftModel(data_path="x", epochs=2, shuffle=False), seed=7)
    assert plain == data.samples * 2


def test_job_spec_sft_block_validates_and_round_trips() -> None:
    from artfleet.specs.job import spec_from_proto, spec_to_proto

    spec = validate_spec({"sft": {"data_path": "/d.jsonl", "min_score": 0.0, "shuffle": False}})
    back = spec_from_proto(spec_to_proto(spec))
    assert back.sft == spec.sft and back.sft is not None and back.sft.min_score == 0.0
    assert spec_from_proto(spec_to_proto(validate_spec({}))).sft is None
    for bad, field in (
        ({"sft": {"data_path": ""}}, "sft.data_path"),
        ({"sft": {"data_path": "x", "epochs": 0}}, "sft.epochs"),
        ({"sft": {"data_path": "x", "learning_rate": 0}}, "sft.learning_rate"),
        ({"sft": {"data_path": "x", "format": "csv"}}, "sft.format"),
        ({"sft": {"data_path": "x", "batch": 2}}, "sft.batch"),
    ):
        with pytest.raises(InvalidArgument) as info:
            validate_spec(bad)
        assert info.value.field == field


def test_a_stored_spec_with_the_earlier_format_name_loads_as_offline() -> None:
    from artfleet.specs.job import config_hash, spec_from_proto, spec_to_proto

    (earlier,) = FORMAT_ALIASES
    old = validate_spec({"sft": {"data_path": str(OFFLINE_SAMPLES), "format": earlier}})
    new = validate_spec({"sft": {"data_path": str(OFFLINE_SAMPLES), "format": "offline"}})
    assert old == new and old.sft is not None and old.sft.format == "offline"
    assert config_hash(old) == config_hash(new)
    stored = spec_to_proto(new)
    stored.sft.format = earlier  # as a job submitted before the rename sits in Redis
    assert spec_from_proto(stored) == new
    assert len(load_samples(old.sft).samples) == 3
