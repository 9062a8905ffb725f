"""The HTTP API and web console: a thin translation onto the fleet's gRPC services."""

__version__ = "0.1.0"
