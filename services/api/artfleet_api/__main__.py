"""`artfleet-api`: settings first, then FastAPI on uvicorn (imported only once they parse)."""

from __future__ import annotations

from artfleet.logs import setup_logging
from artfleet.service import load_settings
from artfleet_api.settings import ApiSettings


def main() -> None:
    settings = load_settings(ApiSettings)
    setup_logging(settings.log_level, "api")
    import uvicorn

    from artfleet_api.app import create_app

    uvicorn.run(
        create_app(settings, settings.metrics_port),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        # SIGTERM: finish requests in flight (an SSE stream ends when its client goes).
        timeout_graceful_shutdown=10,
    )


if __name__ == "__main__":
    main()
