"""The Tinker-compatible API under /api/v1: every call handed to the
trainer's TinkerApi gRPC service, which owns sessions, training clients and futures."""
