"""The Celery app that carries group tasks from the trainer to rollout workers.

Work goes trainer → rollout as one Celery task per group on the `rollout` queue; groups
come back through the step-batch contract (`artfleet.contracts.batches`), not through Celery.
"""

from __future__ import annotations

import base64

from celery import Celery

ROLLOUT_QUEUE = "rollout"
RUN_GROUP_TASK = "artfleet.rollout.run_group"


def make_celery(redis_url: str, name: str = "artfleet") -> Celery:
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
        broker_transport_options={"visibility_timeout": 3600},
        worker_hijack_root_logger=False,
    )
    return app


def encode_payload(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def decode_payload(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)
