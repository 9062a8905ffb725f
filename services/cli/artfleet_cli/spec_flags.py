"""Command-line flags derived from a spec model's fields: one flag per scalar field, its
type and default read from the model (never copied here), so a field added to the spec is
a flag too. `jobs submit` takes the job spec's remaining fields and the `grpo:` block's
this way; the model validates the values, so errors name the spec key."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import typer
from pydantic import BaseModel

F = TypeVar("F", bound=Callable[..., Any])
_SCALARS = (bool, int, float, str)


@dataclass(frozen=True)
class Flag:
    param: str  # the command's parameter name
    key: str  # the spec key it sets: `max_tokens`, `grpo.epsilon`, `sft.epochs`
    kind: type
    help: str
    name: str  # the flag without dashes: `max-tokens`, `epsilon`, `sft-epochs`


def _flag_type(annotation: Any) -> type | None:
    """The CLI type of a scalar field (Literal → str, validated by the model); else None."""
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return _flag_type(args[0])
    if origin is Literal:
        return str
    return annotation if annotation in _SCALARS else None


def derive_flags(
    model: type[BaseModel],
    *,
    what: str,
    prefix: str = "",
    skip: Iterable[str] = (),
    flag_prefix: str = "",
) -> list[Flag]:
    """A flag per scalar field of `model` not in `skip`; `prefix` nests the key (`grpo.`),
    `flag_prefix` starts the flag's name (`sft-`: `--sft-epochs`)."""
    flags = []
    for name, field in model.model_fields.items():
        kind = _flag_type(field.annotation)
        if name in skip or kind is None:
            continue
        default = "unset" if field.default is None else repr(field.default)
        help_ = f"{field.description or what} ({prefix}{name}; default {default})"
        flag = (flag_prefix + name).replace("_", "-")
        param = f"{prefix.replace('.', '_')}{name}"
        flags.append(Flag(param, f"{prefix}{name}", kind, help_, flag))
    return flags


def with_flags(flags: list[Flag]) -> Callable[[F], F]:
    """Adds `flags` to a typer command that takes them as `**values` (None unless given)."""

    def decorate(func: F) -> F:
        signature = inspect.signature(func, eval_str=True)
        params = [p for p in signature.parameters.values() if p.kind != p.VAR_KEYWORD]
        for flag in flags:
            name = flag.name
            decl = f"--{name}/--no-{name}" if flag.kind is bool else f"--{name}"
            option = typer.Option(None, decl, help=flag.help)
            params.append(
                inspect.Parameter(
                    flag.param,
                    inspect.Parameter.KEYWORD_ONLY,
                    default=option,
                    annotation=flag.kind | None,
                )
            )
        func.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        return func

    return decorate


def flag_values(flags: list[Flag], values: dict[str, Any]) -> dict[str, Any]:
    """{spec key: value} of the derived flags a command received."""
    return {flag.key: values.get(flag.param) for flag in flags}
