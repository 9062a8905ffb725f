"""ArtFleet: a fleet of services that trains LLM agents with ART (GRPO + LoRA)."""

__version__ = "0.1.0"
