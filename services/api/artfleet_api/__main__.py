"""`artfleet-api`: settings first, then FastAPI on uvicorn (imported only once they parse)."""

from __future__ import annotations

from artfleet.runtime.logs import setup_logging
from artfleet.runtime.service import load_settings, run
from artfleet_api.settings import ApiSettings


def main() -> None:
    settings = load_settings(ApiSettings)
    setup_logging(settings.log_level, "api")
    from artfleet_api.server import ApiServer

    # Our own signal handling (artfleet.runtime.service.run): SIGTERM stops the server, which
    # finishes requests in flight, and the process exits 0 like every other service.
    run(ApiServer(settings))


if __name__ == "__main__":
    main()
