"""Judge token counts from litellm's success callback.

ART's RULER calls litellm itself and keeps the response (and its `usage`) to itself, so
tokens are counted where litellm reports every call: a callback. Each call carries, in
litellm's `metadata`, the scorer name and which metrics set to count into.
"""

from __future__ import annotations

import threading
from typing import Any

import litellm
from litellm.integrations.custom_logger import CustomLogger

from ..metrics import RewardMetrics

_SCORER, _TARGET = "artfleet_scorer", "artfleet_metrics"
_targets: dict[str, RewardMetrics] = {}
_lock = threading.Lock()
_installed = False


def count_tokens(kwargs: dict[str, Any], response: Any) -> None:
    metadata = (kwargs.get("litellm_params") or {}).get("metadata") or {}
    metrics = _targets.get(str(metadata.get(_TARGET)))
    usage = getattr(response, "usage", None)
    if metrics is None or usage is None:
        return
    scorer = str(metadata.get(_SCORER, "unknown"))
    for kind in ("prompt", "completion"):
        value = getattr(usage, f"{kind}_tokens", None)
        if isinstance(value, int) and value > 0:
            metrics.judge_tokens.labels(scorer=scorer, kind=kind).inc(value)


class _TokenCounter(CustomLogger):
    async def async_log_success_event(
        self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        count_tokens(kwargs, response_obj)


def tracking_metadata(metrics: RewardMetrics, scorer: str) -> dict[str, str]:
    """litellm `metadata` that makes the call's tokens count in `metrics` for `scorer`."""
    global _installed
    key = str(id(metrics))
    with _lock:
        _targets[key] = metrics  # a handful per process: one per servicer
        if not _installed:
            litellm.callbacks = [*litellm.callbacks, _TokenCounter()]
            _installed = True
    return {_SCORER: scorer, _TARGET: key}
