"""What every spec model shares: strict values, unknown keys named, and errors that name
the field the way a job spec spells it (`reward[1].params.judge.model`)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from artfleet.contracts.errors import InvalidArgument

# ---------------------------------------------------------------- errors


class InvalidSpec(InvalidArgument):
    """A reward spec that cannot be used; `field` is its path, e.g. `reward[1].name`."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message, field=field)
        self.reason = message


class FieldError(ValueError):
    """A validator's complaint about one of its fields: `loc` continues pydantic's path."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc
        self.message = message


_MESSAGES = {
    "missing": "is required",
    "extra_forbidden": "unknown key",
    "string_type": "must be a string",
    "string_too_short": "must be a non-empty string",
    "list_type": "must be a list",
    **dict.fromkeys(("float_type", "float_parsing", "finite_number"), "must be a finite number"),
    **dict.fromkeys(("int_type", "int_parsing", "int_from_float"), "must be an integer"),
    **dict.fromkeys(("bool_type", "bool_parsing"), "must be true or false"),
    **dict.fromkeys(("dict_type", "model_type", "model_attributes_type"), "must be an object"),
}
_BOUNDS = {
    "greater_than": (">", "gt"),
    "greater_than_equal": (">=", "ge"),
    "less_than": ("<", "lt"),
    "less_than_equal": ("<=", "le"),
}


def _describe(error: Any) -> tuple[tuple[str | int, ...], str]:
    """(path, message) of one pydantic error, in our words."""
    loc = tuple(error["loc"])
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, FieldError):
        return loc + cause.loc, cause.message
    if isinstance(cause, ValueError):
        return loc, str(cause)
    ctx = error.get("ctx") or {}
    kind = error["type"]
    if kind == "literal_error":
        return loc, f"must be one of: {ctx.get('expected', '')}"
    if kind in _BOUNDS:
        sign, key = _BOUNDS[kind]
        return loc, f"must be {sign} {ctx.get(key)}"
    return loc, _MESSAGES.get(kind, str(error["msg"]))


def field_path(loc: tuple[str | int, ...]) -> str:
    """`("reward", 1, "gate", "scorer")` -> `reward[1].gate.scorer`. Union tags (written
    `(form)`) say which form of a value was read; they are no field and are left out."""
    path = ""
    for part in loc:
        if isinstance(part, str) and part.startswith("("):
            continue
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else part)
    return path


def spec_error(exc: ValidationError, prefix: tuple[str | int, ...] = ()) -> InvalidSpec:
    """The first error of a validation, naming its field (after `prefix`)."""
    loc, message = _describe(exc.errors()[0])
    return InvalidSpec(field_path(prefix + loc), message)


def nested_error(exc: ValidationError, *prefix: str | int) -> FieldError:
    loc, message = _describe(exc.errors()[0])
    return FieldError(prefix + loc, message)


# ---------------------------------------------------------------- shared fields


def field_of(model: type[BaseModel], name: str, **changes: Any) -> Any:
    """`model`'s field `name`, to declare again in another model that takes the same value
    (the job spec's reward keys, the HTTP training API's body): its bounds, default and
    description come along, with `changes` (e.g. `default=None`: unset means the spec's).
    Typed Any, like pydantic's `Field()`, so it can stand as a field's default."""
    info = copy.copy(model.model_fields[name])
    for key, value in changes.items():
        setattr(info, key, value)
    return info


def default_of(model: type[BaseModel], name: str) -> Any:
    """The default of `model`'s field `name`, for a front end's option or constant that
    takes that value (so its default is the spec's, never a copy)."""
    return model.model_fields[name].get_default(call_default_factory=True)


# ---------------------------------------------------------------- value types


def _within(low: float, high: float, what: str = "") -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if not low <= value <= high:
            raise ValueError(f"must be {what}in [{low:g}, {high:g}]")
        return value

    return check


Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Positive = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0)]
NonEmpty = Annotated[str, Field(strict=True, min_length=1)]
Temperature = Annotated[Number, AfterValidator(_within(0, 2))]

MaxTokens = Annotated[int, Field(strict=True), AfterValidator(_within(1, 32768, "an integer "))]


class Strict(BaseModel):
    """Strict values (`true` is no number), frozen, and unknown keys named."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    unknown_key: ClassVar[str] = "unknown key"

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in data:
                if key not in cls.model_fields:
                    known = ", ".join(sorted(cls.model_fields)) or "none"
                    raise FieldError((str(key),), f"{cls.unknown_key}; known: {known}")
        return data


class Params(Strict):
    """A built-in scorer's params."""

    unknown_key: ClassVar[str] = "unknown parameter"
