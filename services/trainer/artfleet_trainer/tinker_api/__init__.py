"""The trainer's side of the Tinker-compatible API: the gRPC service
`TinkerApi` that the API service's HTTP front calls (proto/artfleet/v1/tinker_api.proto)."""
