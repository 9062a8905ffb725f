"""The inference service and vLLM's processes, real ones (vLLM's CPU build, SmolLM2): a
SIGKILLed engine core is reported by name and signal and ends the service with a non-zero
status; a SIGKILLed inference service leaves none of vLLM's processes behind. On the way,
a full fine-tune's checkpoint (a whole model folder) is published into vLLM's weights and
answers, while the base model is refused.

Each test starts vLLM once (45 s on a quiet 2-core machine, minutes on a loaded one), with
a KV cache of half a GiB (a fraction: vLLM's VLLM_CPU_KVCACHE_SPACE took whole GiB only).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from waiting import poll

from artfleet.contracts.checkpoint_layout import model_dir, step_dir
from artfleet.contracts.embedded_model import ensure_embedded_cache
from artfleet.contracts.policy_publish import PUBLISH_PATH
from artfleet_cli.fleet import vllm_python
from artfleet_inference.process_group import group_members

pytestmark = [pytest.mark.integration, pytest.mark.slow]
START_TIMEOUT_S = 900.0  # a loaded CI machine: minutes
TOKEN = "vllm-process-test-token"


@dataclass
class Inference:
    proc: subprocess.Popen[bytes]
    log: Path
    vllm_pid: int  # vLLM's API server: also its process group's id
    art: Path  # its ARTFLEET_ART_PATH

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    @property
    def url(self) -> str:
        found = re.search(r"inference on ([\d.]+):(\d+)", self.text())
        assert found, self.text()[-3000:]
        return f"http://{found[1]}:{found[2]}"


def _named(pgid: int, name: str) -> int | None:
    """The member of group `pgid` whose command line names `name` (vLLM sets its titles)."""
    for pid in group_members(pgid):
        try:
            if name in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                return pid
        except OSError:
            continue
    return None


def _vllm_pid(log: Path) -> int | None:
    found = re.search(r"vLLM starting \(pid (\d+)", log.read_text(errors="replace"))
    return int(found[1]) if found else None


@pytest.fixture
def inference(tmp_path: Path, require_infra: Callable[[bool, str], None]) -> Iterator[Inference]:
    python = vllm_python()
    require_infra(bool(python), "no Python with vLLM (make install builds .venv-vllm)")
    env = {
        **os.environ,
        "ARTFLEET_API_TOKEN": TOKEN,
        "ARTFLEET_ART_PATH": str(tmp_path / "art"),
        "ARTFLEET_PORT": "0",
        "ARTFLEET_INFERENCE_VLLM_PYTHON": python,
        "ARTFLEET_INFERENCE_WORKDIR": str(tmp_path / "work"),
        "ARTFLEET_INFERENCE_KV_CACHE_GIB": "0.5",
        "ARTFLEET_SHUTDOWN_GRACE_S": "5",
    }
    log = tmp_path / "inference.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "artfleet_inference"], env=env, stdout=out, stderr=out
        )
    vllm_pid: int | None = None
    try:
        vllm_pid = poll(
            lambda: _vllm_pid(log),
            lambda pid: pid is not None or proc.poll() is not None,
            timeout_s=START_TIMEOUT_S,
        )
        assert vllm_pid is not None, log.read_text(errors="replace")[-3000:]
        served = Inference(proc, log, vllm_pid, tmp_path / "art")
        ready = poll(
            lambda: proc.poll() is not None or "inference on" in served.text(),
            timeout_s=START_TIMEOUT_S,
            interval_s=1,
        )
        assert ready and proc.poll() is None, served.text()[-3000:]
        yield served
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        if vllm_pid is not None:
            group = vllm_pid
            left = poll(lambda: group_members(group), lambda m: not m, timeout_s=60)
            for pid in left:  # never leave them to the next test
                os.kill(pid, signal.SIGKILL)


def test_a_killed_engine_core_is_reported_and_ends_the_service(inference: Inference) -> None:
    engine = _named(inference.vllm_pid, "EngineCore")
    assert engine is not None, "no EngineCore in vLLM's process group"
    os.kill(engine, signal.SIGKILL)
    status = inference.proc.wait(timeout=300)
    assert status == 128 + signal.SIGKILL, inference.text()[-4000:]  # not 0, as it was
    line = next(x for x in inference.text().splitlines() if "vLLM died" in x)
    assert f"its EngineCore (pid {engine}) was killed by SIGKILL (signal 9" in line, line
    assert "exit status 137" in line
    left = poll(lambda: group_members(inference.vllm_pid), lambda m: not m, timeout_s=60)
    assert not left, f"vLLM's processes left: {left}"


def _publish_a_full_checkpoint(inference: Inference) -> None:
    """A full fine-tune's checkpoint of the base vLLM serves (its files; the weights
    linked, not copied: 0.5 GB) published: vLLM reloads its weights from that folder (the
    default memory path), `ft@1` answers, and the base model is refused with the why."""
    base = ensure_embedded_cache()
    checkpoint = step_dir(model_dir(inference.art, "proj", "ft"), 1)
    (checkpoint / "optimizer").mkdir(parents=True)  # DCP files: never read as weights
    (checkpoint / "optimizer" / "__0_0.distcp").write_bytes(b"optimizer state")
    for source in base.iterdir():
        if source.suffix == ".safetensors":
            (checkpoint / source.name).symlink_to(source)
        elif source.is_file() and not source.name.startswith("."):
            shutil.copyfile(source, checkpoint / source.name)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    body = {"name": "ft", "step": 1, "checkpoint": str(checkpoint)}
    published = httpx.post(f"{inference.url}{PUBLISH_PATH}", json=body, headers=auth, timeout=300)
    assert published.status_code == 200, published.text
    ask = {"prompt": "Hello", "max_tokens": 2, "temperature": 0}
    answer = httpx.post(
        f"{inference.url}/v1/completions", json={**ask, "model": "ft"}, headers=auth, timeout=120
    )
    assert answer.status_code == 200 and answer.json()["model"] == "ft@1", answer.text
    refused = httpx.post(
        f"{inference.url}/v1/completions",
        json={**ask, "model": "smollm2-135m-instruct"},
        headers=auth,
        timeout=120,
    )
    assert refused.status_code == 404 and refused.json()["error"]["param"] == "model"
    assert "vLLM's weights are the full fine-tune ft@1" in refused.json()["error"]["message"]


def test_a_killed_inference_service_leaves_no_vllm_process(inference: Inference) -> None:
    _publish_a_full_checkpoint(inference)  # vLLM is up already: a few seconds more
    members = group_members(inference.vllm_pid)
    assert _named(inference.vllm_pid, "EngineCore") in members and len(members) >= 3
    inference.proc.kill()
    inference.proc.wait(30)
    # PR_SET_PDEATHSIG down the chain: the API server, then EngineCore, then its Worker.
    left = poll(lambda: group_members(inference.vllm_pid), lambda m: not m, timeout_s=120)
    assert not left, f"vLLM's processes outlived the SIGKILLed inference service: {left}"
