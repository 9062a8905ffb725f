"""ART for the trainer, training parts included:
`from artfleet_trainer.backends.art_compat import art`.

The trainer is the one process that needs ART's torch side (its loss, preprocessing and
output directories); every other process imports only ART's types
(`artfleet.contracts.art_types`, no torch). Importing ART has side effects that break a CPU
trainer on transformers 5.23 (see shared/notes):

- `import art` replaces `transformers.masking_utils._preprocess_mask_arguments` with a
  wrapper written for transformers 5.2; on 5.23 every forward pass then fails with
  "missing 1 required positional argument: 'layer_idx'". The wrapper only matters for
  3-D (mrope) position ids, which SmolLM2/Llama never use, so the original goes back.
  ART keeps it as `art.transformers.patches._preprocess_mask_arguments`. (When
  `artfleet.contracts.art_types` imported ART first, with transformers hidden, there is no patch
  to undo.)
"""

from __future__ import annotations

# The order matters: transformers first, so that artfleet.contracts.art_types does not hide it;
# artfleet.contracts.art_types before any other ART module, for the environment it sets.
# isort: off
import transformers  # noqa: F401
from artfleet.contracts.art_types import RULER_DEFAULT_RUBRIC, art
import art.loss
import art.preprocessing.inputs
import art.preprocessing.pack
import art.preprocessing.tokenize
import art.utils.output_dirs

# isort: on


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
