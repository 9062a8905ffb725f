"""Both backends implement the job runner's TrainerBackend protocol: every method, async,
callable the way the protocol declares it. The art backend is built on a CPU (no GPU
needed to check its shape); mypy checks TorchBackend statically as well (make_backend)."""

from __future__ import annotations

import inspect
from pathlib import Path

from pydantic import SecretStr

from artfleet_trainer.backends import TrainerBackend
from artfleet_trainer.backends.art_backend import make_art_backend
from artfleet_trainer.backends.art_compat import art  # noqa: F401  (ART's import-time patches first)
from artfleet_trainer.settings import TrainerSettings
from artfleet_trainer.torch_backend import TorchBackend

MEMBERS = (
    "register_model",
    "current_step",
    "discard_checkpoints_after",
    "train",
    "train_sft",
    "close",
)
GENERATORS = frozenset({"train_sft"})  # async generators: batch metrics as they come


def mismatches(cls: type) -> list[str]:
    """How `cls` fails the protocol: missing, not async, or a declared parameter it lacks;
    extra parameters of its own are fine when they have defaults."""
    problems = []
    for name in MEMBERS:
        wanted = inspect.signature(getattr(TrainerBackend, name))
        method = getattr(cls, name, None)
        is_async = inspect.isasyncgenfunction if name in GENERATORS else inspect.iscoroutinefunction
        if method is None or not is_async(method):
            problems.append(f"{name}: missing or not async")
            continue
        params = inspect.signature(method).parameters
        var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
        for pname, param in wanted.parameters.items():
            ours = params.get(pname)
            if ours is None and not (var_kw and param.kind is param.KEYWORD_ONLY):
                problems.append(f"{name}: no parameter {pname!r}")
            elif ours is not None and ours.kind != param.kind:
                problems.append(f"{name}: {pname!r} is {ours.kind.name}, not {param.kind.name}")
        for pname, ours in params.items():
            extra = pname not in wanted.parameters and ours.default is inspect.Parameter.empty
            if extra and ours.kind not in (ours.VAR_POSITIONAL, ours.VAR_KEYWORD):
                problems.append(f"{name}: extra required parameter {pname!r}")
    return problems


def test_the_protocol_lists_what_the_runner_calls() -> None:
    assert mismatches(type("Nothing", (), {})) == [f"{m}: missing or not async" for m in MEMBERS]


def test_torch_backend_implements_the_protocol() -> None:
    assert mismatches(TorchBackend) == []


async def test_art_backend_implements_the_protocol(tmp_path: Path) -> None:
    settings = TrainerSettings(
        api_token=SecretStr("protocol-test-token"), art_path=str(tmp_path / "art")
    )
    backend = make_art_backend(settings)
    try:
        assert mismatches(type(backend)) == []
    finally:
        await backend.close()
