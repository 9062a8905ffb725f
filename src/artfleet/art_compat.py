"""The one place that imports ART: `from artfleet.art_compat import art`.

Importing ART has side effects that break a CPU trainer on transformers 5.23 (see
shared/notes), so every module goes through here instead of `import art`:

- litellm (imported by ART) downloads a model price list at import unless told to use
  its local copy: no network here, and a slow import everywhere else.
- `import art` replaces `transformers.masking_utils._preprocess_mask_arguments` with a
  wrapper written for transformers 5.2; on 5.23 every forward pass then fails with
  "missing 1 required positional argument: 'layer_idx'". The wrapper only matters for
  3-D (mrope) position ids, which SmolLM2/Llama never use, so the original goes back.
  ART keeps it as `art.transformers.patches._preprocess_mask_arguments`.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # weights ship with packages; never download
os.environ.setdefault("WANDB_MODE", "disabled")

import art
import art.dev
import art.loss
import art.preprocessing.inputs
import art.preprocessing.pack
import art.preprocessing.tokenize
import art.rewards  # RULER, for the reward service
import art.trajectories
import art.types
import art.utils.output_dirs

# `art.rewards.ruler` is the function (the package re-exports it over its module name).
from art.rewards.ruler import DEFAULT_RUBRIC as RULER_DEFAULT_RUBRIC


def restore_transformers_masking() -> None:
    """Undo ART's masking patch (idempotent; safe when ART was imported elsewhere first)."""
    try:
        from art.transformers import patches
        from transformers import masking_utils
    except ImportError:  # no transformers, or an ART without the patch: nothing to undo
        return
    patched = getattr(patches, "_patched_preprocess_mask_arguments", None)
    original = getattr(patches, "_preprocess_mask_arguments", None)
    if original is not None and masking_utils._preprocess_mask_arguments is patched:
        masking_utils._preprocess_mask_arguments = original


restore_transformers_masking()

__all__ = ["RULER_DEFAULT_RUBRIC", "art", "restore_transformers_masking"]
