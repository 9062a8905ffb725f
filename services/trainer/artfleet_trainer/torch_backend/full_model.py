"""Full fine-tuning (`finetune: full`): a model whose every weight trains.

A LoRA tenant is an adapter on the one shared frozen base (tenants.py); a full
fine-tune cannot share: its weights are its own. `FullModel` holds a copy of the base of
its own, every parameter trainable, and answers the calls the training code makes of a
tenant (`__call__`, `parameters`, `get_base_model`, `activate`, ...), so the GRPO step,
SFT and the checkpoints' callers run it unchanged.

On several ranks FSDP2 shards all of it: each decoder layer is a unit, and a root unit
holds the rest (embeddings, final norm, output head, tied or not). Parameters, gradients
(reduce-scattered by FSDP, summed: the loss is already scaled by the step's global row
count) and AdamW state are 1/N on each rank. The loss reads the head's weight outside
any forward (training.compute_logprobs chunks its product), so the root's forward
returns it with the hidden states (`_HiddenAndHead`): it is gathered with the root, and
its gradient flows back through FSDP like the embeddings'.

A checkpoint (checkpoint_layout) is a whole Hugging Face model folder, gathered to rank
0 and written there (the inference service and transformers read it as it is), with the
AdamW state in `optimizer/`, saved by every rank's shard with torch.distributed.checkpoint
(DCP): a restart with the same world resumes exactly, one with another world reshards
it on load.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import torch

from artfleet.contracts.checkpoint_layout import OPTIMIZER_DCP

from .model_loader import LoadedModel

log = logging.getLogger(__name__)


def full_finetuning(model: Any) -> bool:
    """The model trains every weight: ART's `_internal_config.init_args.full_finetuning`
    (the job runner sets it for `finetune: full`)."""
    init_args = (getattr(model, "_internal_config", None) or {}).get("init_args") or {}
    return bool(init_args.get("full_finetuning", False))


class _HiddenAndHead(torch.nn.Module):
    """The root FSDP unit's forward: the decoder's last hidden states and the output
    head's weight, gathered while the root is (FSDP keeps the root's parameters gathered
    from its forward to the end of its backward)."""

    def __init__(self, lm: Any) -> None:
        super().__init__()
        self.lm = lm

    def forward(
        self, tokens: torch.Tensor, mask: torch.Tensor | None, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.lm.get_decoder()(
            input_ids=tokens, attention_mask=mask, position_ids=positions, use_cache=False
        ).last_hidden_state
        return hidden, self.lm.get_output_embeddings().weight


class FullModel:
    """A full fine-tune's model: its own copy of the base, every weight trainable; with
    `ranks`, sharded over them (`RankGroup.shard_full`)."""

    def __init__(
        self, loaded: LoadedModel, ranks: Any = None, checkpoint: Path | None = None
    ) -> None:
        """`checkpoint`: a full checkpoint whose weights replace the base's (a resumed
        model; every rank reads it)."""
        self.loaded = loaded
        self.lm = loaded.model
        if self.lm.dtype != torch.float32:
            # The trained weights are fp32 (the master copy); on CUDA ranks FSDP computes
            # in bf16 (RankGroup.shard_full).
            self.lm.float()
        if checkpoint is not None:
            load_weights(self.lm, checkpoint)
        for param in self.lm.parameters():
            param.requires_grad_(True)
        self._root = _HiddenAndHead(self.lm)
        self._ranks = ranks
        if ranks is not None:
            ranks.shard_full(self._root, decoder_units=list(self.lm.get_decoder().layers))

    # --- what the training code calls on "the model" ------------------------------------

    def activate(self, *, force: bool = False) -> None:
        """Nothing to switch: the weights are this model's alone."""

    def hidden_and_head(
        self, tokens: torch.Tensor, mask: torch.Tensor | None, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self._root(tokens, mask, positions)

    def get_base_model(self) -> Any:
        return self.lm

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.lm(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # before __init__ (copy, pickle): no recursion
            raise AttributeError(name)
        # config, generation_config, train/eval, get_input_embeddings ...: the model's
        return getattr(self.lm, name)

    def named_parameters(self, *_: Any, **__: Any) -> Iterator[tuple[str, torch.nn.Parameter]]:
        return self.lm.named_parameters()

    def parameters(self, *_: Any, **__: Any) -> Iterator[torch.nn.Parameter]:
        return self.lm.parameters()

    # --- checkpoints (every rank calls these: they are collectives on ranks) ---------------

    def full_state(self) -> dict[str, torch.Tensor]:
        """The whole model's weights on the CPU: on rank 0 (gathered from the shards), {} on
        the other ranks."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        if self._ranks is None:
            return {k: v.detach().cpu() for k, v in self.lm.state_dict().items()}
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return cast(dict[str, torch.Tensor], get_model_state_dict(self.lm, options=options))

    def save(self, folder: Path, optimizer: torch.optim.Optimizer) -> None:
        """The checkpoint into `folder` (a staging folder every rank sees): rank 0 writes
        the model folder, every rank its shard of the optimizer state."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        weights = self.full_state()
        if self._ranks is None or self._ranks.leader:
            self.lm.save_pretrained(str(folder), state_dict=weights, safe_serialization=True)
            self.loaded.tokenizer.save_pretrained(str(folder))
        if optimizer.state:  # none before the first step (and a step 0 saves none: filling
            # it in, as get_optimizer_state_dict does, would count a step)
            state = {"optimizer": get_optimizer_state_dict(self.lm, optimizer)}
            dcp.save(state, checkpoint_id=str(folder / OPTIMIZER_DCP))

    def load_optimizer(self, optimizer: torch.optim.Optimizer, checkpoint: Path) -> None:
        """A checkpoint's optimizer state into `optimizer` (every rank reads its shard:
        DCP reshards a state saved by another number of ranks); none saved: left fresh."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import (
            get_optimizer_state_dict,
            set_optimizer_state_dict,
        )

        if not (checkpoint / OPTIMIZER_DCP).is_dir():
            return
        # get_optimizer_state_dict fills in the state's tensors (a zero step at rate 0),
        # which DCP then loads in place.
        state = {"optimizer": get_optimizer_state_dict(self.lm, optimizer)}
        dcp.load(state, checkpoint_id=str(checkpoint / OPTIMIZER_DCP))
        set_optimizer_state_dict(self.lm, optimizer, state["optimizer"])

    def param_bytes(self) -> int:
        """This rank's resident parameter bytes (its shards on ranks)."""
        return sum(_local(p).numel() * p.element_size() for p in self.lm.parameters())


def load_weights(lm: Any, checkpoint: Path) -> None:
    """A full checkpoint's weights (its `*.safetensors`, one file or shards) into `lm`;
    a tied head is saved once, under the embeddings' name."""
    from safetensors.torch import load_file

    weights: dict[str, torch.Tensor] = {}
    for shard in sorted(checkpoint.glob("*.safetensors")):
        weights.update(load_file(str(shard)))
    missing, unexpected = lm.load_state_dict(weights, strict=False)
    tied = {"lm_head.weight"} if getattr(lm.config, "tie_word_embeddings", False) else set()
    if unexpected or set(missing) - tied:
        raise ValueError(
            f"{checkpoint} does not hold this model's weights: missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(unexpected)[:3]}"
        )


def _local(param: torch.Tensor) -> torch.Tensor:
    to_local = getattr(param, "to_local", None)
    return to_local() if to_local is not None else param
