"""`python -m artfleet_api.healthcheck`: exit 0 when this container's API answers /health.

The API is up when it answers, 200 or 503: a dependency that is down (the trainer still
loading its model) is /health's news, not a reason to restart the API. Standard library
only, so it stays quick."""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request


def main() -> int:
    url = f"http://127.0.0.1:{os.environ.get('ARTFLEET_PORT', '8000')}/health"
    try:
        with urllib.request.urlopen(url, timeout=3) as reply:
            status = reply.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError as exc:
        print(f"{url}: {exc}", file=sys.stderr)
        return 1
    print(f"{url}: {status}")
    return 0 if status in (200, 503) else 1


if __name__ == "__main__":
    sys.exit(main())
