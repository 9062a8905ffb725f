"""The trainer's side of the HTTP training API (Tinker's protocol): the gRPC service
`TrainingApi` that the API service's HTTP front calls (proto/artfleet/v1/training_api.proto)."""
