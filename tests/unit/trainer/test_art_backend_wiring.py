"""The GPU backend's wiring that can be checked without a GPU: ART's LocalBackend builds on
a CPU, and the hook our subclass overrides still has the shape ART 0.5.18 gives it."""

from __future__ import annotations

import inspect
from pathlib import Path

from pydantic import SecretStr

from artfleet_trainer.backends.art_backend import make_art_backend
from artfleet_trainer.backends.art_compat import art  # noqa: F401  (ART's import-time patches first)
from artfleet_trainer.settings import TrainerSettings


async def test_art_backend_is_a_local_backend_with_the_proxy(tmp_path: Path) -> None:
    from art.local import LocalBackend

    settings = TrainerSettings(
        api_token=SecretStr("wiring-test-token"),
        art_path=str(tmp_path / "art"),
        inference_host="127.0.0.1",
        inference_port=0,
    )
    backend = make_art_backend(settings)
    proxy = backend.inference_proxy
    try:
        assert isinstance(backend, LocalBackend)
        assert proxy.host == "127.0.0.1"
        assert not proxy.started  # binds only when a job starts vLLM
        ours = inspect.signature(type(backend)._prepare_backend_for_training)
        arts = inspect.signature(LocalBackend._prepare_backend_for_training)
        assert list(ours.parameters) == list(arts.parameters) == ["self", "model", "config"]
    finally:
        await backend.close()
