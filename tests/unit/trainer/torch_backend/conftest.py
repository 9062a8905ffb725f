"""Torch backend unit tests run tiny models: one torch thread for all of them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from artfleet_trainer.torch_backend.worker import torch_threads


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread() -> Iterator[None]:
    # A tiny model gains nothing from threads, and on a busy 2-core machine a 2-thread
    # OpenMP team stalls at every op (measurements in torch_backend/worker.py).
    with torch_threads(1):
        yield
