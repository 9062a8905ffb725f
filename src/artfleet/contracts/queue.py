"""The Celery app that carries group tasks from the trainer to rollout workers.

Work goes trainer → rollout as one Celery task per group on the `rollout` queue; groups
come back through the step-batch contract (`artfleet.contracts.batches`), not through Celery.
"""

from __future__ import annotations

import base64

from celery import Celery

ROLLOUT_QUEUE = "rollout"
RUN_GROUP_TASK = "artfleet.rollout.run_group"
# A task delivered to a worker that died before it claimed the group (SIGKILL, or kombu's
# worker exit when Redis restarts under it) goes back to the queue after this long. Kombu's
# default is an hour, for which the step's gather would wait. A task running longer is
# delivered again meanwhile; the worker that gets it sees the group held and skips it.
VISIBILITY_TIMEOUT_S = 120.0
RESTORE_EVERY_S = 10  # each worker's sweep of deliveries past the timeout


def make_celery(
    redis_url: str, name: str = "artfleet", visibility_timeout_s: float = VISIBILITY_TIMEOUT_S
) -> Celery:
    app = Celery(name, broker=redis_url)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        # A worker that dies mid-group gives the task back only after visibility_timeout;
        # the group itself runs again within its lease (artfleet.contracts.batches: leases).
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,  # a group is minutes of work: take one at a time
        task_default_queue=ROLLOUT_QUEUE,
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": visibility_timeout_s,
            "unacked_restore_interval": RESTORE_EVERY_S,
            "unacked_restore_throttle": 1,  # kombu's 10 would sweep every 100 s
        },
        worker_hijack_root_logger=False,
    )
    return app


def encode_payload(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def decode_payload(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)
