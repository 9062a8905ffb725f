"""Serving across a training step: rows sampled by the old adapter finish on it.

The backend trains its one peft model in place, so the old LoRA weights are gone once a
step is trained. When rows are running at that moment (an asynchronous job's rollouts of
the next step), the backend copies the adapter's tensors before training (LoRA r=8 on
SmolLM2-135M: about 10 MB), and after it the engine *drains*: the old tensors go back into
the model, the running rows finish on the policy that began them (their key/values and
logprobs stay one policy's), new requests wait, and when the last old row finishes the
new tensors return and the new step is served. On CPU the drain is short: the rows left
are those that were running when the training step took the model.

A training step that starts while a drain still runs ends it first (the new weights come
back, the few old rows left go on under them, and their key/values are not cached): the
next step must train the newest weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class AdapterSnapshot:
    """A copy of a model's trainable (LoRA) tensors, by parameter name."""

    tensors: dict[str, torch.Tensor]

    @classmethod
    def take(cls, model: Any) -> AdapterSnapshot:
        # By name, not by requires_grad: a tenant's view (torch_backend.tenants) lists its
        # own adapter's tensors whether or not another tenant is active now.
        with torch.no_grad():
            return cls(
                {
                    name: param.detach().clone()
                    for name, param in model.named_parameters()
                    if "lora_" in name
                }
            )

    def load_into(self, model: Any) -> None:
        """Copy the tensors back in place (the optimizer keeps its parameters)."""
        with torch.no_grad():
            for name, param in model.named_parameters():
                saved = self.tensors.get(name)
                if saved is not None:
                    param.copy_(saved)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


@dataclass
class Drain:
    """The running rows finish on `old`; `new` returns to the model afterwards."""

    new: AdapterSnapshot
    rows: int  # rows that were running when the weights changed (for the log)

    @classmethod
    def start(cls, model: Any, old: AdapterSnapshot, rows: int) -> Drain:
        """Keep the model's (new) tensors aside and put `old` back in."""
        new = AdapterSnapshot.take(model)
        old.load_into(model)
        return cls(new, rows)

    def end(self, model: Any) -> None:
        self.new.load_into(model)
