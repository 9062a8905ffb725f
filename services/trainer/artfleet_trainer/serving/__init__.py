"""How the trainer's policies reach the engine that serves them: one seam, one
implementation per engine, chosen once from the settings (`make_serving`).

- `artfleet_trainer.torch_serving.TorchServing`: the trainer's own OpenAI-compatible
  server on the live weights (`ARTFLEET_INFERENCE_ENGINE=torch`);
- `artfleet_trainer.serving.inference_service.InferenceServiceServing`: the vLLM
  inference service, every replica behind `ARTFLEET_INFERENCE_URL`
  (`ARTFLEET_INFERENCE_ENGINE=vllm`, the default).

The torch backend calls only this protocol; it has no engine branches. The `weights_*`
and `attach`/`detach` hooks matter only to an engine that serves the trainer's live
weights in-process (rows still generating must finish on the weights that began them);
an engine that serves saved checkpoints takes them as no-ops and acts on `publish`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from artfleet_trainer.torch_serving.options import TorchServerOptions

if TYPE_CHECKING:
    from artfleet_trainer.settings import TrainerSettings


class PolicyServing(Protocol):
    async def start(self) -> None:
        """Begin serving (bind, or start watching the engine's replicas)."""

    async def stop(self) -> None:
        """Stop within a bounded time; in-flight requests end."""

    async def endpoint(self) -> tuple[str, str]:
        """(OpenAI base URL, key) rollout workers and judges use, serving from then on."""
        ...

    async def sampling_endpoint(self) -> tuple[str, str]:
        """(OpenAI base URL, key) where the trainer itself samples its policies."""
        ...

    def public_url(self) -> str | None:
        """The base URL rollouts use, once known (None before an in-process server binds)."""

    async def healthy(self) -> bool:
        """Whether a policy request would be answered now."""
        ...

    def attach(self, name: str, peft_model: Any, tokenizer: Any, step: int) -> None:
        """Torch thread: the registered model `name` is trained here from now on."""

    async def detach(self, name: str) -> None:
        """The model `name` left the trainer (its checkpoints stay servable)."""

    def weights_changing(self, name: str) -> object | None:
        """Torch thread, before an optimizer step changes `name`'s weights: what rows still
        generating need to finish on the old ones (handed back to `weights_changed`)."""

    def weights_changed(self, name: str, step: int, before: object | None) -> None:
        """Torch thread, after the change: the live weights are `name@step` (-1: not saved)."""

    async def publish(self, name: str, step: int, checkpoint: Path, base_model: str) -> None:
        """The saved checkpoint `step` of `name` is what `name` and `name@step` answer from
        now on. Raises InferenceRefused when the engine will never serve it."""

    async def retire(self, name: str, steps: list[int]) -> None:
        """Checkpoints deleted (retention, `models prune|delete`): stop serving them."""


def make_serving(settings: TrainerSettings) -> PolicyServing | TorchServerOptions:
    """The engine the settings name. The trainer's own server is built by the torch backend
    on its own worker and weights, so for it this answers the server's options."""
    if settings.inference_engine == "torch":
        return TorchServerOptions(
            host=settings.inference_host,
            port=settings.inference_port,
            prefix_cache_bytes=settings.prefix_cache_bytes,
        )
    from artfleet_trainer.serving.inference_service import InferenceServiceServing

    return InferenceServiceServing.for_settings(settings)
