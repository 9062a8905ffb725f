"""A registered trainable model's state on a torch backend, and what of a model travels to
the follower ranks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from artfleet_trainer.backends.art_compat import art

from .full_model import FullModel
from .tenants import TenantModel


@dataclass(eq=False)
class ModelState:
    """A registered trainable model: its weights, optimizer and the step they are."""

    model: art.TrainableModel
    # its adapter on the shared base (tenants.py), or a full fine-tune's model (full_model.py)
    peft_model: TenantModel | FullModel
    tokenizer: Any
    optimizer: torch.optim.AdamW
    output_dir: Path
    max_context: int
    step: int  # the saved step the live weights are (-1: changed since the last save)
    priority: int = 0  # its training steps' turn at the gate (turn_gate.py)


def portable(model: art.TrainableModel) -> art.TrainableModel:
    """What a follower rank needs of a model, picklable: a registered model holds its
    backend (`model.register(backend)`), which holds the process group."""
    return art.TrainableModel(
        name=model.name,
        project=model.project,
        base_model=model.base_model,
        _internal_config=getattr(model, "_internal_config", None),
    )
