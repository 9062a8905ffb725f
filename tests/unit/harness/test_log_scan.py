"""The log scan the fleet test relies on finds what it should, and only that."""

from __future__ import annotations

from pathlib import Path

from log_scan import leaked_secrets, log_files


def test_finds_a_secret_in_any_log_and_ignores_other_files(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "trainer.log").write_text("INFO started\n")
    (tmp_path / "logs" / "sandbox.log").write_text("token=s3cret-token in a traceback\n")
    (tmp_path / "art" / "run").mkdir(parents=True)
    (tmp_path / "art" / "run" / "history.jsonl").write_text('{"judge": "judge-key-1"}\n')
    (tmp_path / "art" / "weights.bin").write_bytes(b"s3cret-token")  # not a log
    secrets = {"API token": "s3cret-token", "judge key": "judge-key-1", "unset": ""}
    leaks = leaked_secrets(tmp_path, secrets)
    assert sorted(leaks) == sorted(
        [
            f"{tmp_path / 'logs' / 'sandbox.log'}: API token",
            f"{tmp_path / 'art' / 'run' / 'history.jsonl'}: judge key",
        ]
    )
    assert len(log_files(tmp_path)) == 3
