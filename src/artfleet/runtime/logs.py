"""Logging with the request id of the RPC being served on every line."""

from __future__ import annotations

import contextvars
import logging
import sys

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


def setup_logging(level: str = "INFO", service: str = "artfleet") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_RequestIdFilter())
    handler.setFormatter(
        logging.Formatter(
            f"%(asctime)s %(levelname)s {service} [%(request_id)s] %(name)s: %(message)s"
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Chatty libraries: keep their warnings, drop their debug/info noise.
    for name in ("httpx", "urllib3", "LiteLLM", "litellm", "weave"):
        logging.getLogger(name).setLevel(logging.WARNING)
