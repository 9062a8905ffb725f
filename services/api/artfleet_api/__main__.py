"""`artfleet-api`: settings first, then FastAPI on uvicorn (imported only once they parse).

Our own signal handling (artfleet.runtime.service.run): SIGTERM stops the server, which
finishes requests in flight, and the process exits 0 like every other service."""

from __future__ import annotations

from artfleet.runtime.service import service_main
from artfleet_api.settings import ApiSettings


def main() -> None:
    service_main(ApiSettings, "api", "artfleet_api.server:ApiServer")


if __name__ == "__main__":
    main()
