"""`InferenceServiceServing`: the vLLM inference service (artfleet_inference) serves the
policy; every checkpoint the trainer saves is published to each of its replicas
(replicas.py). Rollout workers reach the service at `ARTFLEET_INFERENCE_PUBLIC_URL`."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from artfleet.clients.replicas import split_urls
from artfleet.contracts.policy_publish import PublishPolicy
from artfleet_trainer.clients.inference_client import InferenceUnavailable
from artfleet_trainer.serving.replicas import InferenceReplicas
from artfleet_trainer.settings import TrainerSettings

log = logging.getLogger(__name__)


class InferenceServiceServing:
    def __init__(self, replicas: InferenceReplicas, public_url: str, token: str) -> None:
        """`public_url`: the OpenAI base URL rollout workers use (…/v1; a name that
        resolves to every replica, or comma-separated URLs)."""
        self.replicas = replicas
        self._public_url = public_url.rstrip("/")
        self._token = token

    @classmethod
    def for_settings(cls, settings: TrainerSettings) -> InferenceServiceServing:
        token = settings.api_token.get_secret_value()
        replicas = InferenceReplicas(
            settings.inference_url, token, probe_s=settings.inference_probe_s
        )
        # By default rollouts reach the replicas the way the trainer does: the same name
        # (which resolves to each), or the same list.
        own = ",".join(f"{url.rstrip('/')}/v1" for url in split_urls(settings.inference_url))
        return cls(replicas, settings.inference_public_url or own, token)

    async def start(self) -> None:
        self.replicas.start()

    async def stop(self) -> None:
        await self.replicas.stop()

    def public_url(self) -> str | None:
        return self._public_url

    async def endpoint(self) -> tuple[str, str]:
        return self._public_url, self._token

    async def sampling_endpoint(self) -> tuple[str, str]:
        return f"{await self.replicas.sampling_url()}/v1", self._token

    async def healthy(self) -> bool:
        await self.replicas.replicas()
        return bool(self.replicas.serving())

    # The service serves saved checkpoints: the live weights are not its concern.
    def attach(self, name: str, peft_model: Any, tokenizer: Any, step: int) -> None:
        pass

    async def detach(self, name: str) -> None:
        pass

    def weights_changing(self, name: str) -> object | None:
        return None

    def weights_changed(self, name: str, step: int, before: object | None) -> None:
        pass

    async def publish(self, name: str, step: int, checkpoint: Path, base_model: str) -> None:
        message = PublishPolicy(
            name=name, step=step, checkpoint=str(checkpoint), base_model=base_model
        )
        try:
            served = await self.replicas.publish(message)
        except InferenceUnavailable as exc:
            # The checkpoint is saved: replicas serve it by name from the volume when they
            # are back, and the watch loop publishes it to each. A refusal (a base model
            # the service does not serve) is raised: no job may train a policy nobody
            # can serve.
            log.warning("%s@%d not published (%s); served from disk on request", name, step, exc)
            return
        log.info("published %s@%d to %d inference replica(s)", name, step, served)

    async def retire(self, name: str, steps: list[int]) -> None:
        for step in steps:
            await self.replicas.retire(name, step)
