"""ArtFleet reward service: scores trajectories (process rewards, task checks, ...)."""
