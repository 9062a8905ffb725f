"""When a server stream that broke is worth opening again, and how long to pause first.

Shared by every client that follows a job's events (`artfleet jobs watch`, the HTTP API's
Server-Sent Events): the trainer rides out short Redis outages itself; what still reaches
a client (the trainer restarting, a proxy closing the stream, an outage past the trainer's
own budget) is UNAVAILABLE, or UNKNOWN "Stream removed". A client reopens from the event
after the last one it saw, so nothing is lost or repeated, and gives up after `ATTEMPTS`
failed reconnects in a row (an event received starts the count again).
"""

from __future__ import annotations

import grpc

ATTEMPTS = 8
FIRST_PAUSE_S = 1.0
MAX_PAUSE_S = 10.0


def transient(code: grpc.StatusCode, details: str | None) -> bool:
    """Whether a stream that ended with `code` and `details` is worth opening again."""
    if code == grpc.StatusCode.UNAVAILABLE:
        return True
    return code == grpc.StatusCode.UNKNOWN and "Stream removed" in (details or "")


def pause_s(failures: int, first_s: float = FIRST_PAUSE_S, max_s: float = MAX_PAUSE_S) -> float:
    """The pause before reconnect number `failures` (1, 2, ...): doubling, capped."""
    return float(min(first_s * 2 ** (failures - 1), max_s))
