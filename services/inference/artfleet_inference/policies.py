"""Which weights answer a requested model name (pure logic; the front acts on it).

Names, as the fleet uses them: `name@step` (a checkpoint), `name` or `name@latest` (its
latest), `name@best` (the one its job marked best; checkpoint_layout resolves the
aliases), and the base model's name. vLLM holds one set of base weights; in `merged` mode the newest
published policy is merged into them (served at base speed) and every other policy,
the base model included, is a LoRA on top of them (lora_math.write_difference); in
`lora` mode the weights stay the base model's and each policy is its own checkpoint
as a LoRA.

A full fine-tune (`finetune: full`) owns vLLM's weights: its checkpoint is a whole model,
reloaded in place in either mode, and nothing else is a LoRA difference to it. While the
weights are a full fine-tune's, its step in them is the only policy served (the base
model, LoRA policies and its other steps are refused with the why), a LoRA publish is
refused, and a full checkpoint found on disk is served only if it is the one in the weights.

Only checkpoints the trainer wrote are served: a published folder, or a model folder
found by a plain name under the ART path (`*/models/<name>/checkpoints/<step:04d>`),
so a request cannot make the service read an arbitrary path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from artfleet.contracts.checkpoint_layout import (
    BEST,
    StepRef,
    describe_missing,
    is_full_checkpoint,
    is_latest,
    parse_model_name,
)

# Merged mode: publishes of other models, in a row, that pass the merge to the next one.
HANDOVER_PUBLISHES = 3


class UnknownPolicy(LookupError):
    """No served weights answer to the requested name (`why`: the reason, when known)."""

    def __init__(self, requested: str, why: str = "") -> None:
        self.message = f"model {requested!r} is not served here" + (f": {why}" if why else "")
        super().__init__(self.message)


class PublishRefused(ValueError):
    """A publish this service cannot serve; `param`: the message's field it is about."""

    def __init__(self, message: str, param: str) -> None:
        self.param = param
        super().__init__(message)


@dataclass(frozen=True)
class Route:
    """`vllm_model`: the name vLLM knows; `public`: the name the answer carries.
    `adapter`: a LoRA to have loaded first (its source checkpoint, None for the base
    model), with `against` the merged checkpoint it is a difference to (None: plain)."""

    vllm_model: str
    public: str
    adapter: Path | None = None
    against: Path | None = None

    @property
    def needs_adapter(self) -> bool:
        """Only vLLM's own weights (the base, or the merged policy) need no adapter."""
        return self.adapter is not None or self.against is not None


@dataclass
class PolicyTable:
    base_name: str
    mode: Literal["merged", "lora"]
    find: Callable[[str, StepRef], tuple[int, Path] | None]
    base_aliases: frozenset[str] = frozenset()
    is_full: Callable[[Path], bool] = is_full_checkpoint  # a full fine-tune's checkpoint
    latest: dict[str, tuple[int, Path]] = field(default_factory=dict)  # published
    merged: tuple[str, int, Path] | None = None  # in vLLM's weights now
    merged_full: bool = False  # `merged` is a full fine-tune's whole model, not a LoRA
    merged_version: int = 0  # bumps on every reload: difference adapters name it
    others_since_owner: int = 0  # other models' publishes since the merged one's last

    def publish(self, name: str, step: int, checkpoint: Path) -> bool:
        """Record a new latest policy; True when vLLM's weights must be reloaded with it.
        A step older than the latest one published is refused.

        Merged mode with several models training (tenants of one trainer): the merged
        weights stay with one of them, and its publishes reload them; the others' are
        served as LoRA differences against them, so two running jobs never take the
        weights from each other at every step. The merge passes to a publisher once the
        one merged has been silent for HANDOVER_PUBLISHES of the others' (it finished).

        A full fine-tune's checkpoint always reloads the weights, in either mode; a LoRA
        one while they are a full fine-tune's is refused (PublishRefused)."""
        current = self.latest.get(name)
        if current is not None and step < current[0]:
            message = f"{name}@{step} is older than the published {name}@{current[0]}"
            raise PublishRefused(message, "step")
        full = self.is_full(checkpoint)
        if not full and self.merged_full:
            raise PublishRefused(
                f"{name}@{step} is a LoRA checkpoint (a difference to the base model's "
                f"weights) and {self._full_owner_why()}; restart the inference service to "
                "serve LoRA policies again",
                "checkpoint",
            )
        self.latest[name] = (step, checkpoint)
        if full:
            return True
        if self.mode != "merged":
            return False
        if self.merged is None or self.merged[0] == name:
            self.others_since_owner = 0
            return True
        self.others_since_owner += 1
        return self.others_since_owner > HANDOVER_PUBLISHES

    def set_merged(self, name: str, step: int, checkpoint: Path) -> None:
        """vLLM's weights are now `checkpoint`'s. A full fine-tune's take them whole: the
        other models' published policies can no longer be served (they leave `latest`)."""
        if self.merged is None or self.merged[0] != name:
            self.others_since_owner = 0
        self.merged = (name, step, checkpoint)
        self.merged_full = self.is_full(checkpoint)
        self.merged_version += 1
        if self.merged_full:
            self.latest = {k: v for k, v in self.latest.items() if k == name}

    def retire(self, name: str, step: int | None) -> None:
        if step is None or self.latest.get(name, (None,))[0] == step:
            self.latest.pop(name, None)

    def is_base(self, requested: str) -> bool:
        return requested == self.base_name or requested in self.base_aliases

    def route(self, requested: str) -> Route:
        """Raises UnknownPolicy, or ModelRefError for a malformed `name@...`."""
        if self.merged_full:
            return self._full_route(requested)
        if self.is_base(requested):
            if self.merged is None:
                return Route(self.base_name, self.base_name)
            return self._lora(self.base_name, None)
        name, step = parse_model_name(requested)
        found = self._resolve(name, step)
        if found is None:
            raise UnknownPolicy(requested, describe_missing(name, step) if step == BEST else "")
        step, checkpoint = found
        public = f"{name}@{step}"
        if self.merged is not None and self.merged[:2] == (name, step):
            return Route(self.base_name, public)
        if self.is_full(checkpoint):  # a whole model: never a LoRA (lora_math would fail)
            raise UnknownPolicy(
                requested,
                f"{public} is a full fine-tune's checkpoint, served only while it is in "
                "vLLM's weights (publish it: one full fine-tune per inference service, "
                "its latest step)",
            )
        return self._lora(public, checkpoint)

    def _full_route(self, requested: str) -> Route:
        """vLLM's weights are a full fine-tune's: only its step in them answers."""
        assert self.merged is not None
        owner, owner_step, _ = self.merged
        name, step = (None, None) if self.is_base(requested) else parse_model_name(requested)
        if name == owner:
            if is_latest(step):  # its step in the weights (a newer one may be on its way)
                step = owner_step
            elif step == BEST:
                found = self.find(name, step)
                step = found[0] if found is not None else None
            if step == owner_step:
                return Route(self.base_name, f"{owner}@{owner_step}")
        raise UnknownPolicy(requested, self._full_owner_why())

    def _full_owner_why(self) -> str:
        assert self.merged is not None
        owner = f"{self.merged[0]}@{self.merged[1]}"
        return (
            f"vLLM's weights are the full fine-tune {owner}; one full fine-tune per "
            "inference service serves its latest step only (the base model, LoRA policies "
            "and its other steps are not served meanwhile)"
        )

    def _resolve(self, name: str, step: StepRef) -> tuple[int, Path] | None:
        latest = self.latest.get(name)
        if latest is not None and (is_latest(step) or step == latest[0]):
            return latest
        return self.find(name, step)

    def _lora(self, public: str, checkpoint: Path | None) -> Route:
        against = self.merged[2] if self.merged is not None else None
        if checkpoint is None and against is None:  # the base model: vLLM's own weights
            return Route(self.base_name, public)
        # A difference adapter holds only for the merged weights it was written against.
        vllm_name = public if against is None else f"{public}~m{self.merged_version}"
        return Route(vllm_name, public, checkpoint, against)
