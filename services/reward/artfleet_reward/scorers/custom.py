"""A custom scorer written as a function (an `artfleet.scorers` entry point).

What the function receives is said by its parameters' names, so a reward function from an
ART script ports as it is:
- its first parameter is the episode record (`artfleet.v1.Episode`: turns, finish, tests,
  check), unless that parameter is named `trajectory` or `messages`;
- a parameter named `trajectory` gets the episode as an `art.Trajectory` (its
  `messages_and_choices` as OpenAI messages, `tools`, `reward`, `metrics`, `metadata`), one
  named `messages` the OpenAI messages, one named `episode` the record;
- every other parameter is a param from the job's spec, checked against the signature at
  submit. The function may be `async`; it returns a float (or a `Scored`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from artfleet.contracts.art_types import art
from artfleet.contracts.messages import messages_of, scalars_from_proto, tools_from_json
from artfleet.v1 import common_pb2 as pb

from .base import ERROR, GroupContext, InvalidSpec, Result, Scored, Scorer, ScorerDef, ScorerError

EPISODE, TRAJECTORY, MESSAGES = "episode", "trajectory", "messages"
INJECTED = (EPISODE, TRAJECTORY, MESSAGES)


def as_art_trajectory(trajectory: pb.Trajectory) -> art.Trajectory:
    return art.Trajectory(
        messages_and_choices=cast(Any, messages_of(trajectory)),  # plain message dicts
        tools=tools_from_json(trajectory.tools_json),
        reward=trajectory.reward,
        metrics=scalars_from_proto(trajectory.metrics),
        metadata=scalars_from_proto(trajectory.metadata),
    )


def _injected(signature: inspect.Signature) -> dict[str, str]:
    """Parameter name -> what it receives (episode, trajectory or messages)."""
    names = list(signature.parameters)
    injected = {name: name for name in names if name in INJECTED}
    if names and names[0] not in INJECTED:
        injected[names[0]] = EPISODE  # the documented `fn(episode, **params)`
    return injected


class FunctionScorer(Scorer):
    """One call of the function per trajectory, with what its parameters ask for."""

    def __init__(
        self, fn: Callable[..., Any], injected: Mapping[str, str], params: Mapping[str, Any]
    ) -> None:
        self._fn = fn
        self._injected = dict(injected)
        self._params = dict(params)

    async def score(self, ctx: GroupContext, indices: Sequence[int]) -> list[Result]:
        results: list[Result] = []
        for i in indices:
            try:
                value = self._fn(**self._arguments(ctx, i), **self._params)
                if inspect.isawaitable(value):
                    value = await value
                results.append(value if isinstance(value, Scored) else float(value))
            except Exception as exc:  # the plugin's bug fails this trajectory, not the group
                results.append(ScorerError(ERROR, f"{type(exc).__name__}: {exc}"))
        return results

    def _arguments(self, ctx: GroupContext, i: int) -> dict[str, Any]:
        made: dict[str, Any] = {}
        for name, what in self._injected.items():
            if what == EPISODE:
                made[name] = ctx.episodes[i]
            elif what == TRAJECTORY:
                made[name] = as_art_trajectory(ctx.trajectories[i])
            else:
                made[name] = messages_of(ctx.trajectories[i])
        return made


def function_scorer(name: str, fn: Callable[..., Any]) -> ScorerDef:
    signature = inspect.signature(fn)
    injected = _injected(signature)

    def configure(params: Mapping[str, Any], field: str) -> FunctionScorer:
        taken = next((key for key in params if key in injected), None)
        if taken is not None:
            raise InvalidSpec(f"{field}.{taken}", f"{taken!r} is given by the fleet, not a param")
        try:
            signature.bind(**dict.fromkeys(injected), **params)
        except TypeError as exc:
            key = next((k for k in params if k not in signature.parameters), None)
            raise InvalidSpec(f"{field}.{key}" if key else field, str(exc)) from None
        return FunctionScorer(fn, injected, params)

    doc = (inspect.getdoc(fn) or "custom scorer").splitlines()[0]
    return ScorerDef(name, doc, configure)
