"""A group task delivered to a worker that died before acking it comes back to the queue
after the visibility timeout (artfleet.contracts.queue), on real Redis: a worker SIGKILLed
right after it took a task, or one that kombu ends when Redis restarts under it, leaves the
delivery unacked, and the step's gather would wait for it (kombu's default: an hour)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import redis

from artfleet.contracts.queue import make_celery

pytestmark = pytest.mark.integration

QUEUE = "redelivery-test"
VISIBILITY_S = 2.0
# Takes one message without acking it and exits at once: nothing gives it back.
DYING_CONSUMER = """
import os, sys
from artfleet.contracts.queue import make_celery
app = make_celery(sys.argv[1], visibility_timeout_s=float(sys.argv[2]))
with app.connection_for_read() as conn:
    message = conn.SimpleQueue(sys.argv[3]).get(timeout=60)
    print(message.payload, flush=True)
    os._exit(1)
"""


@pytest.fixture
def url(redis_url: str) -> Iterator[str]:
    url = redis_url.rsplit("/", 1)[0] + "/9"
    redis.Redis.from_url(url).flushdb()
    yield url
    redis.Redis.from_url(url).flushdb()


def test_a_task_a_dead_worker_took_is_delivered_again(url: str) -> None:
    app = make_celery(url, visibility_timeout_s=VISIBILITY_S)
    with app.connection_for_write() as conn:
        conn.SimpleQueue(QUEUE).put({"group": "g1"})
    dead = subprocess.run(
        [sys.executable, "-c", DYING_CONSUMER, url, str(VISIBILITY_S), QUEUE],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "'group': 'g1'" in dead.stdout, dead.stderr
    assert redis.Redis.from_url(url).hlen("unacked") == 1  # taken, never acked

    deadline = time.monotonic() + 120
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue(QUEUE)
        while True:
            try:
                message = queue.get(timeout=1)  # each empty poll sweeps expired deliveries
                break
            except queue.Empty:
                assert time.monotonic() < deadline, "the dead worker's task never came back"
        message.ack()
    assert message.payload == {"group": "g1"}
    assert redis.Redis.from_url(url).hlen("unacked") == 0


def test_workers_get_a_timeout_far_below_kombus_hour() -> None:
    options = make_celery("redis://127.0.0.1:1/0").conf.broker_transport_options
    assert options["visibility_timeout"] <= 300
    assert options["unacked_restore_throttle"] == 1
