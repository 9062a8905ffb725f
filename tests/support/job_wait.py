"""Wait for a job to end over gRPC, as a client that heeds UNAVAILABLE's "try again
shortly" does (the trainer answers so while its Redis is briefly unreachable)."""

from __future__ import annotations

import time
from typing import Any

import grpc

from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2

ENDED = frozenset({pb.JOB_STATE_SUCCEEDED, pb.JOB_STATE_FAILED, pb.JOB_STATE_CANCELLED})


def wait_ended(trainer: Any, job_id: str, timeout_s: float) -> pb.Job:
    """The job once it has ended: follows WatchJob, watching again after UNAVAILABLE."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"job {job_id} did not end in {timeout_s:.0f}s"
        try:
            for _ in trainer.WatchJob(trainer_pb2.WatchJobRequest(job_id=job_id), timeout=left):
                pass
            job = trainer.GetJob(trainer_pb2.GetJobRequest(job_id=job_id), timeout=30)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            time.sleep(1)  # the server asked to try again shortly
            continue
        if job.state in ENDED:
            return job
