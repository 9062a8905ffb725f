"""The HTTP training API (Tinker's protocol) under /api/v1: every call handed to the
trainer's TrainingApi gRPC service, which owns sessions, training clients and futures."""
