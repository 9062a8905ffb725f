"""ArtFleet rollout service: agents and environments (task sets); runs episodes."""
