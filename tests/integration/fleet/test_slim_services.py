"""The sandbox, rollout and reward processes never load torch.

Their images install no torch (only the trainer's does), so an import of it there would
crash in production while passing in a development environment that has everything. Each
service starts here as the local fleet starts it (`python -m artfleet_<name>`), becomes
healthy, and then no libtorch* may be mapped into it (/proc/<pid>/maps). The rollout and
reward services must have ART loaded by then (its polars library mapped), so the check
covers the path that used to bring torch in: the codec and RULER importing ART.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from repo_paths import ROOT

from artfleet.runtime.healthcheck import check
from artfleet.runtime.service import free_port

pytestmark = pytest.mark.integration

TOKEN = "slim-services-test-token"
# ART imports polars at `import art`: its native library shows that ART is in.
ART_MARKER = "polars"


def _env(port: int, redis_url: str, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARTFLEET_")}
    paths = [str(ROOT / "src"), *(str(ROOT / "services" / s) for s in ("rollout", "reward"))]
    paths.append(str(ROOT / "services" / "sandbox"))
    env.update(
        PYTHONPATH=os.pathsep.join([*paths, env.get("PYTHONPATH", "")]),
        ARTFLEET_API_TOKEN=TOKEN,
        ARTFLEET_PORT=str(port),
        ARTFLEET_REDIS_URL=redis_url,
        ARTFLEET_REPLICA_ID="slim-test",
        ARTFLEET_SANDBOX_ALLOW_UNISOLATED="1",  # local backend without bubblewrap in CI
        ARTFLEET_SANDBOX_TARGET="127.0.0.1:1",
        ARTFLEET_REWARD_TARGET="127.0.0.1:1",
        ARTFLEET_ART_PATH=str(tmp_path / "art"),
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        HF_HUB_OFFLINE="1",
        PYTHONUNBUFFERED="1",
    )
    return env


def _family(pid: int) -> list[int]:
    """The process and its descendants (a Celery worker may fork)."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                todo.extend(int(c) for c in (task / "children").read_text().split())
            except OSError:
                continue
    return out


def _mapped_libraries(pid: int) -> set[str]:
    libraries: set[str] = set()
    for process in _family(pid):
        try:
            lines = Path(f"/proc/{process}/maps").read_text().splitlines()
        except OSError:  # gone meanwhile
            continue
        libraries.update(line.split()[-1] for line in lines if "/" in line)
    return libraries


@pytest.fixture
def start_service(tmp_path: Path) -> Iterator:
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str, redis_url: str = "redis://127.0.0.1:1/0") -> tuple[int, Path]:
        port = free_port()
        log = tmp_path / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", f"artfleet_{name}"],
                env=_env(port, redis_url, tmp_path),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=tmp_path,
            )
        started.append(proc)
        deadline = time.monotonic() + 120
        while not check(f"127.0.0.1:{port}", timeout_s=1.0)[0]:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{name} did not become healthy:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        return proc.pid, log

    yield start
    for proc in started:
        proc.terminate()
    for proc in started:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _assert_no_torch(libraries: set[str]) -> None:
    torch_libs = sorted(lib for lib in libraries if Path(lib).name.startswith("libtorch"))
    assert not torch_libs, f"torch is loaded: {torch_libs}"


def test_sandbox_loads_no_torch(start_service) -> None:
    pid, _ = start_service("sandbox")
    _assert_no_torch(_mapped_libraries(pid))


def test_reward_loads_art_but_no_torch(start_service) -> None:
    pid, _ = start_service("reward")
    libraries = _mapped_libraries(pid)
    assert any(ART_MARKER in lib for lib in libraries), "ART is not loaded: the check is moot"
    _assert_no_torch(libraries)


def test_rollout_loads_art_but_no_torch(start_service, redis_url: str) -> None:
    pid, log = start_service("rollout", redis_url)
    # Healthy comes before the Celery worker: wait until it consumes the queue too.
    deadline = time.monotonic() + 60
    while b" ready." not in log.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert b" ready." in log.read_bytes(), log.read_text()[-3000:]
    libraries = _mapped_libraries(pid)
    assert any(ART_MARKER in lib for lib in libraries), "ART is not loaded: the check is moot"
    _assert_no_torch(libraries)


@pytest.mark.parametrize(
    "module",
    [
        "artfleet.contracts.codec",
        "artfleet_rollout.worker",
        "artfleet_reward.servicer",
        "artfleet_cli.main",
    ],
)
def test_light_modules_import_no_torch(module: str, tmp_path: Path) -> None:
    # A fresh interpreter: this one may have torch already. transformers is installed in a
    # development environment, and `import art` would import it (and torch) unhidden.
    code = (
        f"import sys, {module}\n"
        "heavy = sorted(m for m in ('torch', 'transformers') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
        "assert sys.modules.get('transformers', 0) is not None  # not left hidden\n"
    )
    env = _env(0, "redis://127.0.0.1:1/0", tmp_path)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("module", ["artfleet.contracts.messages", "artfleet_api.app"])
def test_the_api_and_the_plain_codec_import_neither_art_nor_openai(
    module: str, tmp_path: Path
) -> None:
    # The API's image installs neither (pyproject's `api` extra): plain messages go through
    # artfleet.contracts.messages, never the ART codec.
    env = _env(0, "redis://127.0.0.1:1/0", tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "services" / "api"), env["PYTHONPATH"]])
    code = (
        f"import sys, {module}\n"
        "heavy = sorted(m for m in ('art', 'openai', 'torch') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_trainer_still_gets_art_with_transformers_unpatched(tmp_path: Path) -> None:
    # Whichever comes first, the light types or the trainer's ART, the trainer ends with
    # ART's training modules and transformers' own masking function.
    env = _env(0, "redis://127.0.0.1:1/0", tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "services" / "trainer"), env["PYTHONPATH"]])
    code = (
        "import artfleet.contracts.codec\n"
        "from artfleet_trainer.backends.art_compat import art\n"
        "from transformers import masking_utils\n"
        "assert art.loss.loss_fn and art.preprocessing.tokenize.tokenize_trajectory_groups\n"
        "assert masking_utils._preprocess_mask_arguments.__module__ == masking_utils.__name__\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
