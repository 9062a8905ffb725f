"""How the `art` kind calls an ART rollout function: bound once, by its signature, at load.

ART's examples write their rollouts in a few shapes, and each runs as written:

    rollout(model, scenario)              # the environment's scenarios (any name: `puzzle`)
    rollout(model, step, is_validation)   # draws its own task (ART's 2048, tic-tac-toe)
    rollout(model, step)
    rollout(model)
    rollout(model, *, step, is_validation)    # keyword forms of the same

The first parameter is the model (or a keyword-only `model`); `scenario`, `step` and
`is_validation` are bound by name; a single other required parameter is the scenario, when
the environment has scenarios. Parameters with defaults the fleet does not know keep their
defaults (`verbose=False`). Anything else cannot be called, and the environment is listed
as broken with the reason, so a job naming it is refused at submit, not at its first
episode. Every shape reads the episode's step and split through
`artfleet.clients.episode.rollout_context()`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from artfleet.contracts.art_types import art

Rollout = Callable[..., Awaitable[art.Trajectory]]
MODEL, SCENARIO, STEP, IS_VALIDATION = "model", "scenario", "step", "is_validation"
_BY_NAME = (SCENARIO, STEP, IS_VALIDATION)
_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
SHAPES = (
    "rollout(model, scenario), rollout(model, step, is_validation), rollout(model, step) "
    "or rollout(model) (keyword forms too)"
)


class ArtEnvironmentError(TypeError):
    """An ArtEnvironment the fleet cannot run: the environment is listed broken with this
    message (it says all; no traceback)."""


class RolloutSignatureError(ArtEnvironmentError):
    """A rollout function the fleet cannot call."""


@dataclass(frozen=True)
class RolloutShape:
    """Which value each parameter gets: positional-only ones in order, the rest by name."""

    positional: tuple[str, ...]  # what each positional-only argument is (MODEL, STEP, ...)
    keywords: tuple[tuple[str, str], ...]  # (parameter name, what it gets)
    text: str  # the shape as written: `rollout(model, step, is_validation)`

    @property
    def takes_scenario(self) -> bool:
        return SCENARIO in self.positional or any(what == SCENARIO for _, what in self.keywords)

    def call(self, rollout: Rollout, values: Mapping[str, Any]) -> Awaitable[art.Trajectory]:
        args = [values[what] for what in self.positional]
        return rollout(*args, **{name: values[what] for name, what in self.keywords})


def bind_rollout(rollout: Rollout, *, scenarios: bool, plugin: str) -> RolloutShape:
    """The shape `rollout` is called in; RolloutSignatureError names what does not fit."""
    try:
        parameters = list(inspect.signature(rollout).parameters.values())
    except (TypeError, ValueError) as exc:
        raise RolloutSignatureError(
            f"{plugin}: the rollout's signature cannot be read: {exc}"
        ) from None
    named = [p for p in parameters if p.kind not in _VARIADIC]
    roles = _roles(named, scenarios=scenarios)
    text = f"{getattr(rollout, '__name__', 'rollout')}({', '.join(p.name for p in named)})"
    if MODEL not in roles.values():
        raise RolloutSignatureError(f"{plugin}: {text} takes no model; the fleet calls {SHAPES}")
    for p in named:
        if p.name not in roles and p.default is inspect.Parameter.empty:
            raise RolloutSignatureError(
                f"{plugin}: {text}: the fleet has nothing to pass as {p.name!r}; it calls "
                f"{SHAPES}. A task the function draws itself reads its step and split from "
                "artfleet.clients.episode.rollout_context()"
            )
    if SCENARIO in roles.values() and not scenarios:
        name = next(n for n, what in roles.items() if what == SCENARIO)
        raise RolloutSignatureError(
            f"{plugin}: {text} takes a scenario ({name!r}) but the environment names none: "
            "give ArtEnvironment its scenarios, or draw the task in the function "
            "(rollout(model, step, is_validation))"
        )
    positional: list[str] = []
    for p in named:
        if p.kind is not inspect.Parameter.POSITIONAL_ONLY:
            break
        if p.name not in roles:  # a default before a parameter the fleet passes
            later = named[len(positional) :]
            if any(q.name in roles and q.kind is p.kind for q in later):
                raise RolloutSignatureError(
                    f"{plugin}: {text}: positional-only {p.name!r} stands before parameters "
                    "the fleet passes"
                )
            break
        positional.append(roles[p.name])
    keywords = tuple((p.name, roles[p.name]) for p in named[len(positional) :] if p.name in roles)
    return RolloutShape(tuple(positional), keywords, text)


def _roles(named: list[inspect.Parameter], *, scenarios: bool) -> dict[str, str]:
    """Parameter name -> what the fleet passes: the first positional one (or a keyword-only
    `model`) is the model; `scenario`, `step`, `is_validation` by name; with scenarios, one
    other required parameter is the scenario (ART's `rollout(model, puzzle)`)."""
    roles: dict[str, str] = {}
    positional = [p for p in named if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    if positional:
        roles[positional[0].name] = MODEL
    elif any(p.name == MODEL for p in named):
        roles[MODEL] = MODEL
    for p in named:
        if p.name in _BY_NAME and p.name not in roles:
            roles[p.name] = p.name
    if scenarios and SCENARIO not in roles.values():
        rest = [p for p in named if p.name not in roles and p.default is inspect.Parameter.empty]
        if len(rest) == 1:
            roles[rest[0].name] = SCENARIO
    return roles
