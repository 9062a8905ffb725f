"""The one place that imports `art`: fixes what importing it breaks (see shared/notes).

- litellm would download a price list at import: keep its bundled map.
- `import art` swaps transformers' `_preprocess_mask_arguments` for a wrapper written for
  transformers 5.2 that breaks every forward pass on 5.23; the wrapper only matters for
  3-D (mrope) position ids, so the original is restored.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

import art

try:  # transformers is optional for processes that only move trajectories around
    from art.transformers import patches as _patches
    from transformers import masking_utils as _masking_utils

    _masking_utils._preprocess_mask_arguments = _patches._preprocess_mask_arguments
except ImportError:  # pragma: no cover - art without its transformers extras
    pass

__all__ = ["art"]
