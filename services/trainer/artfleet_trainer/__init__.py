"""ArtFleet trainer service: jobs, the model, training steps, checkpoints, inference."""
