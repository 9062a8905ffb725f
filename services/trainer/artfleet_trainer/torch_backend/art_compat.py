"""The one place this package imports ART: `from .art_compat import art`.

Importing ART has two side effects that break a CPU trainer on transformers 5.23, so
every module of the package goes through here instead of `import art`:

- litellm (imported by ART) downloads a model price list at import unless told to use
  its local copy: no network here, and a slow import everywhere else.
- `import art` replaces `transformers.masking_utils._preprocess_mask_arguments` with a
  wrapper written for transformers 5.2; on 5.23 every forward pass then fails with
  "missing 1 required positional argument: 'layer_idx'". The wrapper only matters for
  3-D (mrope) position ids, which SmolLM2/Llama never use, so putting the original
  back is safe. ART keeps the original as `art.transformers.patches._preprocess_mask_arguments`.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import art
import art.dev
import art.loss
import art.preprocessing.inputs
import art.preprocessing.pack
import art.preprocessing.tokenize
import art.types
import art.utils.output_dirs
from transformers import masking_utils


def restore_transformers_masking() -> None:
    """Undo ART's masking patch (idempotent; safe when ART was imported elsewhere first)."""
    try:
        from art.transformers import patches
    except ImportError:  # an ART without the patch module: nothing to undo
        return
    patched = getattr(patches, "_patched_preprocess_mask_arguments", None)
    original = getattr(patches, "_preprocess_mask_arguments", None)
    if original is not None and masking_utils._preprocess_mask_arguments is patched:
        masking_utils._preprocess_mask_arguments = original


restore_transformers_masking()

__all__ = ["art", "restore_transformers_masking"]
