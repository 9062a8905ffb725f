"""gRPC plumbing shared by every service: server lifecycle, interceptors, clients."""
