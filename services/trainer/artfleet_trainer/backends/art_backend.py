"""The `art` backend: ART's LocalBackend (Unsloth + vLLM on a GPU) behind the inference proxy.

vLLM listens on 127.0.0.1 inside the trainer; whenever ART starts (or restarts) it for a
model, the proxy on the trainer's inference port is pointed at it, so rollout workers and
judges reach the policy at `ARTFLEET_INFERENCE_PUBLIC_URL` with the fleet token.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from artfleet.contracts.checkpoint_layout import delete_steps_after
from artfleet_trainer.backends.inference_proxy import InferenceProxy
from artfleet_trainer.settings import TrainerSettings

log = logging.getLogger(__name__)


def make_art_backend(settings: TrainerSettings) -> Any:
    """A TrainerBackend (typed Any: its class exists only once ART is imported; the
    protocol test checks it)."""
    # Imported here: art.local pulls in much of ART, and only GPU trainers need it.
    from art.local import LocalBackend
    from art.utils.output_dirs import get_model_dir

    proxy = InferenceProxy(
        settings.inference_host,
        settings.inference_port,
        settings.api_token.get_secret_value(),
    )

    class ProxiedLocalBackend(LocalBackend):
        """LocalBackend whose OpenAI server is published through `proxy`."""

        inference_proxy = proxy

        async def _prepare_backend_for_training(
            self, model: Any, config: Any = None
        ) -> tuple[str, str]:
            base_url, api_key = await super()._prepare_backend_for_training(model, config)
            if not proxy.started:
                await proxy.start()
            proxy.set_upstream(base_url, api_key)
            return base_url, api_key

        # The job runner's interface (artfleet_trainer.backends.TrainerBackend).
        async def register_model(self, model: Any) -> None:
            await model.register(self)

        async def current_step(self, model: Any) -> int:
            return await self._get_step(model)

        async def discard_checkpoints_after(self, model: Any, step: int) -> list[int]:
            # Files only: ART loads the latest checkpoint when it starts a model's service,
            # which registration does in a new trainer. A service this process already
            # started keeps its weights (an in-process retry after a Redis outage): said.
            directory = Path(get_model_dir(model=model, art_path=self._path))
            discarded = delete_steps_after(directory, step)
            if discarded and model.name in self._services:
                log.warning("%s: its running service holds step %d", model.name, discarded[-1])
            return discarded

        async def train_sft(
            self,
            model: Any,
            trajectories: list[Any],
            *,
            learning_rate: float,
            batch_size: int,
            max_length: int = 0,
        ) -> AsyncIterator[dict[str, float]]:
            # ART's own SFT (Unsloth), batch by batch; `max_length` is refused at submit
            # (artfleet_trainer.sft.phase.ART_UNSUPPORTED): ART drops by max_seq_length.
            from art.types import TrainSFTConfig

            config = TrainSFTConfig(learning_rate=learning_rate, batch_size=batch_size)
            async for metrics in self._train_sft(model, trajectories, config, {}, False):
                yield metrics

        async def close(self) -> None:
            await proxy.stop()
            await super().close()

    return ProxiedLocalBackend(path=settings.art_path)
