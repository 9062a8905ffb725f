"""The built-in scorers are declared once, in the kernel (artfleet.specs.scorer_params:
name -> params model): every built-in has its params model, every params model belongs to
a built-in, the reward service implements exactly the kernel's built-ins with those
models, and its scorers carry the kernel's names. A table that differs stops the service
at import."""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

from artfleet.specs import scorer_params
from artfleet.specs.base import Params
from artfleet.specs.reward import ScorerModel
from artfleet.specs.scorer_params import BUILTIN_PARAMS, POLICY_JUDGE, PROCESS, RULER
from artfleet_reward.scorers import BUILTIN, builtin_table, registry
from artfleet_reward.scorers.base import ScorerDef, builtin

# The least params each built-in is configured with (the others take none).
REQUIRED_PARAMS: dict[str, dict[str, Any]] = {
    scorer_params.RULER: {"judge": POLICY_JUDGE},
    scorer_params.JUDGE: {"judge": POLICY_JUDGE},
}


def _params_models() -> list[type[Params]]:
    """The module's `...Params` models: by convention, a built-in's params or a base of them."""
    return [
        cls
        for name, cls in inspect.getmembers(scorer_params, inspect.isclass)
        if name.endswith("Params") and issubclass(cls, Params) and cls is not Params
    ]


def test_every_builtin_has_its_params_model_and_every_params_model_a_builtin() -> None:
    models = set(BUILTIN_PARAMS.values())
    assert len(models) == len(BUILTIN_PARAMS), "two built-ins share a params model"
    assert all(issubclass(model, Params) for model in models)
    orphans = [
        cls.__name__
        for cls in _params_models()
        if cls not in models and not any(issubclass(model, cls) for model in models)
    ]
    assert not orphans, f"params models no built-in scorer takes: {orphans}"


def test_the_reward_service_implements_exactly_the_kernels_builtins() -> None:
    assert list(BUILTIN) == list(BUILTIN_PARAMS)
    for name, definition in BUILTIN.items():
        assert (definition.name, definition.params) == (name, BUILTIN_PARAMS[name])
        assert registry()[name] is definition


@pytest.mark.parametrize("name", list(BUILTIN_PARAMS))
def test_each_builtin_scorer_carries_the_kernels_name(name: str) -> None:
    params = REQUIRED_PARAMS.get(name, {})
    # The kernel checks a built-in's params (a custom scorer's it leaves to the service).
    assert ScorerModel(name=name, params=params).options() is not None
    scorer = BUILTIN[name].build(params, "reward[0].params")
    assert getattr(scorer, "name", name) == name


def test_a_table_that_differs_from_the_kernels_stops_the_service() -> None:
    implemented = list(BUILTIN.values())
    with pytest.raises(ImportError, match=re.escape(f"without an implementation: ['{RULER}']")):
        builtin_table(d for d in implemented if d.name != RULER)
    with pytest.raises(ImportError, match="implemented twice"):
        builtin_table([*implemented, BUILTIN[PROCESS]])
    stranger = ScorerDef("length_bonus", "not the kernel's", BUILTIN[PROCESS].configure)
    with pytest.raises(ImportError, match=r"not in artfleet\.specs\.scorer_params\.BUILTIN_PARAMS"):
        builtin_table([*implemented, stranger])
    other_params = ScorerDef(PROCESS, "", BUILTIN[PROCESS].configure, BUILTIN_PARAMS[RULER])
    with pytest.raises(ImportError, match="params model"):
        builtin_table([other_params, *(d for d in implemented if d.name != PROCESS)])


def test_only_a_kernel_name_makes_a_builtin() -> None:
    definition = builtin(PROCESS, "the process table", BUILTIN[PROCESS].configure)
    assert definition.params is BUILTIN_PARAMS[PROCESS]
    with pytest.raises(LookupError, match="not a built-in scorer"):
        builtin("length_bonus", "a custom scorer", BUILTIN[PROCESS].configure)
