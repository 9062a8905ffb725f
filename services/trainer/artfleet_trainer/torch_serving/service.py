"""`TorchServing`: the trainer's own server as the torch backend's `PolicyServing`.

It serves the live weights: a training step changes them in place, so rows still
generating finish on a snapshot of the old adapter (`weights_changing` takes it,
`weights_changed` hands it to the engine) and requests for `name@step` are answered from
the moment the step is saved. Saved checkpoints are found on disk at each request
(frozen.py), so `publish` and `retire` have nothing to do.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from artfleet_trainer.torch_backend.model_loader import LoadedModel
from artfleet_trainer.torch_backend.worker import TorchWorker

from .adapter_versions import AdapterSnapshot
from .frozen import FrozenPolicies
from .generation import BatchEngine, stop_token_ids_of
from .options import TorchServerOptions
from .prefix_cache import PrefixCache
from .scheduler import GenerationScheduler
from .server import InferenceServer, ServedPolicy


class TorchServing:
    def __init__(
        self,
        options: TorchServerOptions,
        *,
        path: str,
        api_key: str,
        worker: TorchWorker,
        gate: AbstractAsyncContextManager[Any],
        loader: Callable[[str], LoadedModel],
        lora_rank: int,
    ) -> None:
        """`gate`: the backend's lock that generation slices and training steps take in
        turns; `worker`: its torch thread; `loader`: its base-model loader (frozen policies)."""
        self.options = options
        self._api_key = api_key
        self._worker = worker
        self._gate = gate
        self._policies: dict[str, ServedPolicy] = {}
        self._frozen = FrozenPolicies(
            path, worker, self._make_policy, self._policies, loader=loader, lora_rank=lora_rank
        )
        self._server = InferenceServer(
            self._policies,
            api_key=api_key,
            host=options.host,
            port=options.port,
            default_max_tokens=options.default_max_tokens,
            loader=self._frozen.get,  # checkpoints and base models, for evaluation
        )

    async def start(self) -> None:
        await self._server.start()

    async def stop(self) -> None:
        await self._server.stop()
        await self._frozen.close()
        for policy in self._policies.values():
            await policy.scheduler.close()

    def public_url(self) -> str | None:
        if self._server.port is None:
            return None
        host = self.options.advertise_host or self._server.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return f"http://{host}:{self._server.port}/v1"

    async def endpoint(self) -> tuple[str, str]:
        await self._server.start()
        url = self.public_url()
        assert url is not None
        return url, self._api_key

    async def sampling_endpoint(self) -> tuple[str, str]:
        port = await self._server.start()
        return f"http://127.0.0.1:{port}/v1", self._api_key

    async def healthy(self) -> bool:
        return self._server.port is not None

    # --- the live weights ------------------------------------------------------------------

    def attach(self, name: str, peft_model: Any, tokenizer: Any, step: int) -> None:
        self._policies[name] = self._make_policy(name, peft_model, tokenizer, step)

    async def detach(self, name: str) -> None:
        policy = self._policies.pop(name, None)
        if policy is not None:
            await policy.scheduler.close()

    def weights_changing(self, name: str) -> AdapterSnapshot | None:
        # Rows running now finish on the adapter that began them (adapter_versions.py); a
        # drain still going from the last step ends: training takes the newest weights.
        policy = self._policies.get(name)
        if policy is None:
            return None
        engine = policy.scheduler.engine
        engine.end_drain()
        return AdapterSnapshot.take(engine.model) if engine.num_rows else None

    def weights_changed(self, name: str, step: int, before: object | None) -> None:
        # New weights, served as `name@step` from the next admission on: no key/values
        # computed before may be reused; running rows drain on the old adapter.
        policy = self._policies.get(name)
        if policy is None:
            return
        assert before is None or isinstance(before, AdapterSnapshot)
        policy.scheduler.engine.weights_changed(step, before)
        policy.step = step

    async def publish(self, name: str, step: int, checkpoint: Path, base_model: str) -> None:
        """Nothing to do: `weights_changed` already serves `name@step` from memory."""

    async def retire(self, name: str, steps: list[int]) -> None:
        """Nothing to do: checkpoints are found on disk at each request."""

    def _make_policy(self, name: str, peft_model: Any, tokenizer: Any, step: int) -> ServedPolicy:
        # a peft model's (or a full fine-tune's) network; a plain model is its own
        network = (
            peft_model.get_base_model() if hasattr(peft_model, "get_base_model") else peft_model
        )
        max_context = int(getattr(network.config, "max_position_embeddings", 0) or 4096)
        engine = BatchEngine(
            peft_model,
            tokenizer,
            stop_token_ids=stop_token_ids_of(network, tokenizer),
            max_context=max_context,
            prefix_cache=PrefixCache(self.options.prefix_cache_bytes),
            step=step,
        )
        scheduler = GenerationScheduler(
            engine,
            self._gate,
            self._worker,
            max_batch_rows=self.options.max_batch_rows,
            batch_window_s=self.options.batch_window_s,
        )
        return ServedPolicy(name, tokenizer, scheduler, max_context, step=step)
