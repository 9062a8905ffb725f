"""W&B, optional: with WANDB_API_KEY set, a real job's ART logging (train steps
and in-training evals) reaches W&B. W&B runs in offline mode into a temp WANDB_DIR; the
test reads the run's records back from its `.wandb` file (a LevelDB-style log of
wandb_internal_pb2.Record) and checks that the key appears in no file and no log."""

from __future__ import annotations

import asyncio
import json
import secrets
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from test_job_eval import LoggingBackend, redis, run_job

from artfleet.specs.job import JobSpecModel, config_hash
from artfleet.v1 import common_pb2 as pb

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
__all__ = ["redis"]
BLOCK = 32 * 1024  # wandb's record log: 32 KiB blocks of (crc32, length, type) chunks


def wandb_records(path: Path) -> Iterator[Any]:
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a W&B run file"
    pos, pending = 7, b""  # after the 7-byte file header
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # a block's tail too short for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if (kind == 0 and length == 0) or pos + 7 + length > len(data):
            break  # the end, or a record still being written
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
            record.ParseFromString(pending)
            yield record
            pending = b""


def _key(item: Any) -> str:
    return str(item.key or "/".join(item.nested_key))


def history_and_config(run_file: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    history: list[dict[str, Any]] = []
    config: dict[str, Any] = {}
    for record in wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            items = record.history.item
            history.append({_key(i): json.loads(i.value_json) for i in items})
        elif kind == "config":
            config.update({i.key: json.loads(i.value_json) for i in record.config.update})
    return history, config


async def test_with_a_key_arts_logging_reaches_wandb_offline(
    redis: aioredis.Redis,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("wandb", reason="the trainer's optional W&B logging needs wandb")
    key = "local-" + secrets.token_hex(20)
    monkeypatch.setenv("WANDB_API_KEY", key)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    (tmp_path / "wandb").mkdir()
    spec = JobSpecModel.model_validate(
        dict(
            steps=2,
            groups_per_step=2,
            rollouts_per_group=2,
            eval_every_steps=1,
            eval_split="test",
            eval_k=2,
            gather_timeout_s=60,
            experiment="wandb-check",
        )
    )
    job, _events, _ = await asyncio.wait_for(
        run_job(redis, LoggingBackend(tmp_path / "art"), spec), 240
    )
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    runs = list((tmp_path / "wandb" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, runs
    model_name = f"{job.spec.name}-{job.id}"
    (run_file,) = runs[0].glob("run-*.wandb")
    assert run_file.name == f"run-{model_name}.wandb"
    # wandb's service writes the file behind run.finish(); its last record is `exit`.
    deadline = asyncio.get_running_loop().time() + 60
    while "exit" not in {r.WhichOneof("record_type") for r in wandb_records(run_file)}:
        assert asyncio.get_running_loop().time() < deadline, "the W&B run never ended"
        await asyncio.sleep(0.2)
    history, config = history_and_config(run_file)
    train = {h["training_step"]: h for h in history if "train/loss" in h}
    assert sorted(train) == [1, 2] and train[1]["train/loss"] == pytest.approx(0.5)
    val = {h["training_step"]: h for h in history if "val/pass@2" in h}
    assert sorted(val) == [0, 1, 2]
    assert val[0]["val/pass@2"] == pytest.approx(2 / 3)  # the hand count of test_job_eval
    assert config["experiment"] == "wandb-check"
    assert config["config_hash"] == config_hash(spec) and config["job_id"] == job.id
    # The key is in no file W&B wrote and in no log line or output.
    for path in (tmp_path / "wandb").rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
    out, err = capfd.readouterr()
    assert key not in caplog.text and key not in out and key not in err


def test_a_key_leaves_wandb_on_and_no_key_turns_it_off(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    probe = (
        "import os, artfleet.contracts.art_types; "
        "print(os.environ.get('WANDB_MODE', '-'), 'WANDB_API_KEY' in os.environ)"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    modes = []
    # No key, an empty one (compose's `${WANDB_API_KEY:-}`), a real one.
    for key in (None, "", "local-" + secrets.token_hex(20)):
        run_env = env if key is None else {**env, "WANDB_API_KEY": key}
        done = subprocess.run(
            [sys.executable, "-c", probe], env=run_env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        modes.append(done.stdout.strip())
    # ART tests the key's presence only: an empty one must be gone before ART looks.
    assert modes == ["disabled False", "disabled False", "- True"]
