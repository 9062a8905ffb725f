"""The trainer's own server's options (cheap to import: settings and tests build them)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PREFIX_CACHE_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class TorchServerOptions:
    """`host`/`port`: where it binds (port 0 picks one); `advertise_host`: the host put in
    the base URL when clients reach it by another name (a compose service name while it
    binds 0.0.0.0). `max_batch_rows`/`batch_window_s`: dynamic batching (scheduler.py);
    `default_max_tokens`: a request's when it names none; `prefix_cache_bytes`: each served
    model's prefix cache (prefix_cache.py), 0 disables it."""

    host: str = "127.0.0.1"
    port: int = 0
    advertise_host: str | None = None
    max_batch_rows: int = 32
    batch_window_s: float = 0.03
    default_max_tokens: int = 512
    prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES
