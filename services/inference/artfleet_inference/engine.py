"""The policy weights inside vLLM: publishing a checkpoint, loading adapters on demand.

One `PolicyEngine` owns the routing table, the adapters registered in vLLM and the
weights gate: every request holds the gate (shared) from routing until its answer, and
an in-place weight reload holds it alone, so an answer comes from the weights its name
says (no request straddles a reload).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import aiohttp
from prometheus_client import Histogram

from artfleet.contracts.checkpoint_layout import is_full_checkpoint
from artfleet_inference import lora_math, vllm_worker
from artfleet_inference.policies import PolicyTable, Route

log = logging.getLogger(__name__)

PUBLISH_SECONDS = Histogram(
    "artfleet_inference_publish_seconds",
    "A published checkpoint: request → served by vLLM (merged reload, or adapter load)",
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
)
MAX_REGISTERED_ADAPTERS = 8
MergePath = Literal["memory", "disk"]


class EngineError(RuntimeError):
    """vLLM refused or failed a control call."""


class WeightsGate:
    """Many requests share the weights; a reload takes them alone (writers first)."""

    def __init__(self) -> None:
        self._readers = 0
        self._writer = False
        self._waiting_writers = 0
        self._cond = asyncio.Condition()

    @asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        async with self._cond:
            await self._cond.wait_for(lambda: not self._writer and not self._waiting_writers)
            self._readers += 1
        try:
            yield
        finally:
            async with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        async with self._cond:
            self._waiting_writers += 1
            await self._cond.wait_for(lambda: not self._writer and self._readers == 0)
            self._waiting_writers -= 1
            self._writer = True
        try:
            yield
        finally:
            async with self._cond:
                self._writer = False
                self._cond.notify_all()


class PolicyEngine:
    def __init__(
        self,
        table: PolicyTable,
        vllm_url: str,
        vllm_key: str,
        base_dir: Path,
        workdir: Path,
        merge_path: MergePath = "memory",
        max_adapters: int = MAX_REGISTERED_ADAPTERS,
    ) -> None:
        """`max_adapters`: LoRAs kept registered in vLLM (least recently used go first; one
        gone is loaded again on its next request)."""
        self.table = table
        self.merge_path = merge_path
        self.max_adapters = max_adapters
        self.gate = WeightsGate()
        self.vllm_url = vllm_url
        self.headers = {"Authorization": f"Bearer {vllm_key}"}
        self._base_dir = base_dir
        self._workdir = workdir
        self._adapters: OrderedDict[str, Path] = OrderedDict()  # vLLM lora name → folder
        self._adapter_lock = asyncio.Lock()
        self._publish_lock = asyncio.Lock()
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._workdir.mkdir(parents=True, exist_ok=True)
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600))
        # torch and safetensors read every adapter: imported now (seconds on a busy CPU),
        # not inside the first publish, which the trainer waits for.
        await asyncio.to_thread(lora_math.import_tensor_libraries)

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _call(self, path: str, body: Any = None) -> None:
        assert self._session is not None
        async with self._session.post(
            f"{self.vllm_url}{path}", json=body, headers=self.headers
        ) as r:
            if r.status >= 400:
                raise EngineError(f"vLLM {path}: {r.status} {(await r.text())[:500]}")

    # --- publishing ---------------------------------------------------------------------

    async def publish(self, name: str, step: int, checkpoint: Path) -> float:
        """Serve `checkpoint` as `name@step` (and plain `name`); returns the seconds taken."""
        started = time.monotonic()
        async with self._publish_lock:  # one merged copy written at a time
            if self.table.publish(name, step, checkpoint):
                await self._reload_merged(name, step, checkpoint)
            else:
                await self._load_published(self.table.route(f"{name}@{step}"))
        seconds = time.monotonic() - started
        PUBLISH_SECONDS.observe(seconds)
        log.info("serving %s@%d (%.2fs)", name, step, seconds)
        return seconds

    async def _load_published(self, route: Route) -> None:
        """lora mode: the checkpoint's adapter under its versioned name (`name@step`). One
        published again (a job that reuses a name) is unloaded, then loaded: vLLM keeps
        the adapter it read under that name, and its `load_inplace` would read the folder
        again on every request."""
        if route.vllm_model in self._adapters:
            async with self.gate.exclusive(), self._adapter_lock:  # none of its answers mid-way
                self._adapters.pop(route.vllm_model)
                await self._unload(route.vllm_model)
        await self.ensure_adapter(route)

    async def _reload_merged(self, name: str, step: int, checkpoint: Path) -> None:
        """What vLLM reloads is written (into the slot not in use) while requests go on;
        only the reload itself holds the weights alone. A full fine-tune's checkpoint is
        reloaded as it is (prepare_reload), in either mode."""
        slot = (self.table.merged_version + 1) % 2
        rpc = await asyncio.to_thread(
            prepare_reload, self.merge_path, self._base_dir, checkpoint, self._workdir, slot
        )
        async with self.gate.exclusive():
            await self._call("/collective_rpc", rpc)
            # Cached key/values were computed with the old weights.
            await self._call("/reset_prefix_cache")
            self.table.set_merged(name, step, checkpoint)
        # Every adapter registered so far was a difference to the old weights (or to the
        # base): none may answer again.
        current = f"~m{self.table.merged_version}"
        async with self._adapter_lock:
            for lora in [k for k in self._adapters if not k.endswith(current)]:
                self._adapters.pop(lora)
                await self._unload(lora)

    async def retire(self, name: str, step: int | None) -> None:
        """Stop serving `name@step` (every step of `name` when None); a merged policy
        stays in vLLM's weights until the next publish replaces it."""
        self.table.retire(name, step)
        async with self._adapter_lock:
            for lora in list(self._adapters):
                public = lora.split("~")[0]
                if public == f"{name}@{step}" or (step is None and is_model_of(lora, name)):
                    self._adapters.pop(lora)
                    await self._unload(lora)

    # --- adapters -------------------------------------------------------------------------

    async def ensure_adapter(self, route: Route) -> None:
        """Register `route`'s LoRA in vLLM if it is not yet (least recently used go)."""
        if not route.needs_adapter:
            return
        async with self._adapter_lock:
            if route.vllm_model in self._adapters:
                self._adapters.move_to_end(route.vllm_model)
                return
            folder = route.adapter
            if route.against is not None:
                folder = self._workdir / "adapters" / route.vllm_model
                await asyncio.to_thread(self._write_difference, route, folder)
            assert folder is not None
            body = {"lora_name": route.vllm_model, "lora_path": str(folder)}
            await self._call("/v1/load_lora_adapter", body)
            self._adapters[route.vllm_model] = folder
            while len(self._adapters) > self.max_adapters:
                old, _ = self._adapters.popitem(last=False)
                await self._unload(old)

    @staticmethod
    def _write_difference(route: Route, folder: Path) -> None:
        target = lora_math.read_adapter(route.adapter) if route.adapter else None
        merged = lora_math.read_adapter(route.against) if route.against else None
        shutil.rmtree(folder, ignore_errors=True)
        lora_math.write_difference(target, merged, folder)

    async def _unload(self, lora: str) -> None:
        try:
            await self._call("/v1/unload_lora_adapter", {"lora_name": lora})
        except EngineError as exc:  # already gone (vLLM restarted): nothing to free
            log.debug("unload %s: %s", lora, exc)
        if "~m" in lora:
            shutil.rmtree(self._workdir / "adapters" / lora, ignore_errors=True)


def is_model_of(lora: str, name: str) -> bool:
    """`lora` (`name@step` or `name@step~mN`) belongs to the model `name`."""
    return lora.split("~")[0].rpartition("@")[0] == name


def prepare_reload(
    merge_path: MergePath, base_dir: Path, checkpoint: Path, workdir: Path, slot: int
) -> dict[str, Any]:
    """Write what vLLM needs to serve `checkpoint` merged into `base_dir`'s weights (into
    `slot`, 0 or 1: the other one may be what vLLM read last) and return the
    `/collective_rpc` body that loads it.

    memory: the adapter's factors (a few MB); vLLM's worker merges them into the base
    weights itself (vllm_worker.PolicyWeights). disk: the whole merged model folder, for
    vLLM's `reload_weights(weights_path=...)`.

    A full fine-tune's checkpoint is already a whole model folder (its top-level
    `*.safetensors`; its `optimizer/` is not read): nothing is written, vLLM reads it as
    it is, whichever mode."""
    if is_full_checkpoint(checkpoint):
        if merge_path == "memory":
            kwargs = {"base_dir": str(checkpoint), "factors_path": ""}
            return {"method": "artfleet_load_policy", "kwargs": kwargs}
        return {"method": "reload_weights", "kwargs": {"weights_path": str(checkpoint)}}
    adapter = lora_math.read_adapter(checkpoint)
    if merge_path == "memory":
        factors = workdir / f"factors-{slot}.safetensors"
        vllm_worker.save_factors(adapter.factors, factors)
        kwargs = {"base_dir": str(base_dir), "factors_path": str(factors)}
        return {"method": "artfleet_load_policy", "kwargs": kwargs}
    target = workdir / f"merged-{slot}"
    lora_math.write_merged(base_dir, adapter, target)
    return {"method": "reload_weights", "kwargs": {"weights_path": str(target)}}
