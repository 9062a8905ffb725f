"""Kept for old imports: ART's types without torch. Use `artfleet.art_types` (services)
or `artfleet_trainer.art_compat` (the trainer: ART's loss and preprocessing, torch)."""

from __future__ import annotations

from artfleet.art_types import RULER_DEFAULT_RUBRIC, art

__all__ = ["RULER_DEFAULT_RUBRIC", "art"]
