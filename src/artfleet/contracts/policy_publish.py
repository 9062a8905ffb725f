"""The trainer ⇄ inference service hand-off: publish a saved checkpoint, retire one, and
list what a replica serves. One pydantic model per message, validated on both sides: the
trainer builds and sends them (`artfleet_trainer.serving.inference_service`), the
inference service's front parses them (`artfleet_inference.server`) and answers a bad
field with a 400 naming it.

    POST /artfleet/v1/policies         PublishPolicy  → PublishReply
    POST /artfleet/v1/policies/retire  RetirePolicy   → RetireReply
    GET  /artfleet/v1/policies                        → ServedPolicies

A replica that restarts lists nothing: the trainer publishes the current policy to it
once more (artfleet_trainer.serving.replicas).
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from artfleet.contracts.checkpoint_layout import MODEL_NAME

PUBLISH_PATH = "/artfleet/v1/policies"
RETIRE_PATH = "/artfleet/v1/policies/retire"

M = TypeVar("M", bound=BaseModel)

ModelName = Annotated[str, StringConstraints(pattern=MODEL_NAME.pattern)]
Step = Annotated[int, Field(ge=0, strict=True)]


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PublishPolicy(_Message):
    """Serve `checkpoint` (an absolute folder under the ART path holding a LoRA adapter
    of `base_model`) as `name@step`."""

    name: ModelName
    step: Step
    checkpoint: str = Field(min_length=1)
    base_model: str | None = None


class PublishReply(_Message):
    model: str  # `name@step`
    seconds: float = 0.0  # the replica's time to serve it


class RetirePolicy(_Message):
    """Stop serving `name@step` (every step of `name` when `step` is None)."""

    name: ModelName
    step: Step | None = None


class RetireReply(_Message):
    retired: str


class ServedPolicy(_Message):
    name: ModelName
    step: Step


class ServedPolicies(_Message):
    """What one replica serves: the latest published step of each policy."""

    policies: list[ServedPolicy] = Field(default_factory=list)

    def step_of(self, name: str) -> int | None:
        return next((p.step for p in self.policies if p.name == name), None)


class MessageRejected(ValueError):
    """A message that does not match its model; `field` names the first bad field."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


def parse(model: type[M], data: Any) -> M:
    """`data` (a decoded JSON value) as `model`, or MessageRejected naming the field."""
    if not isinstance(data, dict):
        raise MessageRejected("the body must be a JSON object", "body")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "body"
        raise MessageRejected(f"{field!r}: {first['msg']}", field) from None
