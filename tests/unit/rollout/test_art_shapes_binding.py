"""How an ART rollout function is bound by its signature (art_shapes): which parameter gets
the model, the scenario, the step and the validation flag, and the signatures refused."""

from __future__ import annotations

from typing import Any

import pytest

from artfleet_rollout.art_shapes import RolloutSignatureError, bind_rollout

VALUES = {"model": "M", "scenario": "S", "step": 5, "is_validation": True}


async def scenario_named(model: Any, puzzle: Any) -> Any:
    return (model, puzzle)


async def art_2048(model: Any, step: int, is_validation: bool, verbose: bool = False) -> Any:
    return (model, step, is_validation, verbose)


async def variadic(model: Any, *args: Any, **kwargs: Any) -> Any:
    return (model, args, kwargs)


async def keyword_model(*, model: Any, step: int) -> Any:
    return (model, step)


async def positional_only(model: Any, step: int, /, *, is_validation: bool) -> Any:
    return (model, step, is_validation)


@pytest.mark.parametrize(
    ("rollout", "scenarios", "called"),
    [
        (scenario_named, True, ("M", "S")),
        (art_2048, False, ("M", 5, True, False)),
        (variadic, False, ("M", (), {})),
        (keyword_model, False, ("M", 5)),
        (positional_only, False, ("M", 5, True)),
    ],
)
async def test_a_rollout_is_called_in_its_own_shape(
    rollout: Any, scenarios: bool, called: tuple[Any, ...]
) -> None:
    shape = bind_rollout(rollout, scenarios=scenarios, plugin="p")
    assert await shape.call(rollout, VALUES) == called


async def default_first(model: Any, verbose: bool = False, /, step: int = 0) -> Any: ...


async def no_model(*, step: int) -> Any: ...


async def two_unknown(model: Any, a: Any, b: Any) -> Any: ...


@pytest.mark.parametrize(
    ("rollout", "scenarios", "message"),
    [
        (no_model, False, r"no_model\(step\) takes no model"),
        (two_unknown, True, "nothing to pass as 'a'"),
        (scenario_named, False, "nothing to pass as 'puzzle'"),
    ],
)
def test_a_signature_the_fleet_cannot_call_is_refused(
    rollout: Any, scenarios: bool, message: str
) -> None:
    with pytest.raises(RolloutSignatureError, match=message):
        bind_rollout(rollout, scenarios=scenarios, plugin="p")


def test_a_parameter_with_a_default_keeps_it() -> None:
    shape = bind_rollout(default_first, scenarios=False, plugin="p")
    assert shape.positional == ("model",) and shape.keywords == (("step", "step"),)
