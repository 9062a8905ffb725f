"""The `torch` trainer backend: ART's Backend protocol on HF transformers + peft LoRA.

For CPU (or any torch device), the embedded default model and tests: ART's own
tokenization and loss, and a built-in OpenAI-compatible server with dynamic batching.
Importing this package is cheap; `TorchBackend` (which imports ART, torch and
transformers: seconds) loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import TorchBackend
    from .model_loader import DEFAULT_MODEL_NAME, load_base_model

__all__ = ["DEFAULT_MODEL_NAME", "TorchBackend", "load_base_model"]


def __getattr__(name: str) -> Any:
    if name == "TorchBackend":
        from .backend import TorchBackend

        return TorchBackend
    if name in ("DEFAULT_MODEL_NAME", "load_base_model"):
        from . import model_loader

        return getattr(model_loader, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
