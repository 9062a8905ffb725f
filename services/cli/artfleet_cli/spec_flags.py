"""Command-line flags derived from a spec model's fields: one flag per scalar field, its
type, default and help read from the model (never copied here), so a field added to the
spec is a flag too. `jobs submit` takes every scalar key of the job spec, of its `grpo:`
block and of its `sft:` block this way; the model validates the values, so errors name the
spec key. Only a flag's name may be the command's own (`names`: the training scripts'
names that users' scripts type)."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Iterable, Mapping
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
    # The flag's names without dashes, the first shown first: `max-tokens`, `epsilon`,
    # `sft-epochs`, or the command's own (`model`, `base-model`).
    names: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.names[0]


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
    names: Mapping[str, tuple[str, ...]] | None = None,
) -> list[Flag]:
    """A flag per scalar field of `model` not in `skip`; `prefix` nests the key (`grpo.`),
    `flag_prefix` starts the flag's name (`sft-`: `--sft-epochs`), `names` gives a key
    (`sft.data_path`) names of the command's own instead."""
    flags = []
    for name, field in model.model_fields.items():
        kind = _flag_type(field.annotation)
        if name in skip or kind is None:
            continue
        key = f"{prefix}{name}"
        # A required key of a block (`sft.data_path`) is unset until given.
        unset = field.default is None or field.is_required()
        default = "unset" if unset else repr(field.default)
        help_ = f"{field.description or what} ({key}; default {default})"
        flag_names = (names or {}).get(key, ((flag_prefix + name).replace("_", "-"),))
        param = key.replace(".", "_")
        flags.append(Flag(param, key, kind, help_, flag_names))
    return flags


def with_flags(flags: list[Flag]) -> Callable[[F], F]:
    """Adds `flags` to a typer command that takes them as `**values` (None unless given).
    They come after its positional parameters and before its keyword-only ones (after `*`),
    which `--help` lists in that order."""

    def decorate(func: F) -> F:
        signature = inspect.signature(func, eval_str=True)
        own = [p for p in signature.parameters.values() if p.kind != p.VAR_KEYWORD]
        derived = []
        for flag in flags:
            decls = [f"--{n}/--no-{n}" if flag.kind is bool else f"--{n}" for n in flag.names]
            option = typer.Option(None, *decls, help=flag.help)
            derived.append(
                inspect.Parameter(
                    flag.param,
                    inspect.Parameter.KEYWORD_ONLY,
                    default=option,
                    annotation=flag.kind | None,
                )
            )
        params = [p for p in own if p.kind != p.KEYWORD_ONLY]
        params += derived + [p for p in own if p.kind == p.KEYWORD_ONLY]
        func.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        return func

    return decorate


def flag_values(flags: list[Flag], values: dict[str, Any]) -> dict[str, Any]:
    """{spec key: value} of the derived flags a command received."""
    return {flag.key: values.get(flag.param) for flag in flags}
