"""Where a failed episode was raised, as the user sees it (artfleet_rollout.failures): the
last frames of the user's code, not the fleet's, asyncio's or the libraries' between."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import pytest

from artfleet.runtime.logs import request_id
from artfleet_rollout import failures


def _module(name: str, path: str, source: str) -> dict[str, Any]:
    """Functions compiled as if they lived in module `name` at `path` (a frame's module is
    its globals' __name__, its file the code's filename)."""
    namespace: dict[str, Any] = {"__name__": name}
    exec(compile(source, path, "exec"), namespace)
    return namespace


# "Ours" (catching what an episode raised, as the group runner does, and wrapping it), a
# library calling back, and the user's plugin module.
OURS = _module(
    "artfleet_rollout.agents.kinds.fake",
    "/srv/lib/artfleet_rollout/agents/kinds/fake.py",
    "import asyncio\n"
    "async def run_kind(rollout):\n"
    "    return await asyncio.wait_for(rollout(), 10)\n"
    "async def wrapped(rollout):\n"
    "    try:\n"
    "        return await rollout()\n"
    "    except Exception as exc:\n"
    "        raise RuntimeError('the plugin failed') from exc\n"
    "def caught(kind, rollout):\n"
    "    try:\n"
    "        asyncio.run(kind(rollout))\n"
    "    except Exception as exc:\n"
    "        return exc\n",
)
LIBRARY = _module(
    "openai.resources.fake",
    "/srv/lib/openai/resources/fake.py",
    "def create(check):\n    check()\ndef boom():\n    raise KeyError('k')\n",
)
USER = _module(
    "quiz_plugin",
    "/srv/lib/quiz_plugin.py",
    "def check_answer(answer):\n"  # 1
    "    assert answer == '2'\n"  # 2
    "async def rollout():\n"  # 3
    "    create(lambda: check_answer('3'))\n",  # 4: the library calls back
)
USER["create"] = LIBRARY["create"]


def test_the_users_last_frames_innermost_last_without_ours_asyncio_or_a_librarys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "path", ["/srv/lib", *sys.path])
    exc = OURS["caught"](OURS["run_kind"], USER["rollout"])
    assert isinstance(exc, AssertionError)
    assert failures.user_frames(exc) == [
        "quiz_plugin.py:4 in rollout",
        "quiz_plugin.py:4 in <lambda>",
        "quiz_plugin.py:2 in check_answer",
    ]


def test_only_the_last_few_frames_are_kept() -> None:
    deep = _module(
        "deep_plugin",
        "/x/deep_plugin.py",
        "def f(n):\n    if n:\n        return f(n - 1)\n    raise KeyError('k')\n",
    )
    exc = OURS["caught"](OURS["run_kind"], _async(lambda: deep["f"](10)))
    frames = failures.user_frames(exc)
    assert len(frames) == failures.FRAMES == 3
    assert frames == ["/x/deep_plugin.py:3 in f"] * 2 + ["/x/deep_plugin.py:4 in f"]


def _async(call: Callable[[], Any]) -> Callable[[], Any]:
    async def run() -> Any:
        return call()

    return run


def test_a_failure_wrapped_by_our_code_is_found_in_its_cause() -> None:
    exc = OURS["caught"](OURS["wrapped"], USER["rollout"])
    assert isinstance(exc, RuntimeError)
    assert failures.user_frames(exc)[-1] == "/srv/lib/quiz_plugin.py:2 in check_answer"


def test_without_a_frame_of_the_users_the_fleets_last_frames_then_any() -> None:
    broken = _module(
        "artfleet_rollout.fake",
        "/elsewhere/artfleet_rollout/fake.py",
        "def f():\n    create(lambda: 1 / 0)\n",
    )
    broken["create"] = LIBRARY["create"]
    try:
        broken["f"]()
    except ZeroDivisionError as exc:
        assert exc.__traceback__ is not None
        ours_only = exc.with_traceback(exc.__traceback__.tb_next)  # without this test's frame
    # The lambda is ours too (it was compiled in our module); the library's frame is not.
    assert failures.user_frames(ours_only) == [
        "/elsewhere/artfleet_rollout/fake.py:2 in f",
        "/elsewhere/artfleet_rollout/fake.py:2 in <lambda>",
    ]
    try:
        LIBRARY["boom"]()
    except KeyError as exc:
        assert exc.__traceback__ is not None
        library_only = exc.with_traceback(exc.__traceback__.tb_next)
    assert failures.user_frames(library_only) == ["/srv/lib/openai/resources/fake.py:4 in boom"]


def test_a_record_has_the_type_its_frames_the_episodes_and_the_runs_request_id() -> None:
    exc = OURS["caught"](OURS["run_kind"], USER["rollout"])
    token = request_id.set("run-1234")
    try:
        record = failures.record(ExceptionGroup("task group", [exc]), episodes=4)
    finally:
        request_id.reset(token)
    # A bare assert: no message, and the type says what failed.
    assert (record.type, record.message, record.episodes) == ("AssertionError", "", 4)
    assert record.frames[-1].endswith("quiz_plugin.py:2 in check_answer")
    assert record.request_id == "run-1234"
    assert 'quiz_plugin.py", line 2, in check_answer' in record.traceback
    assert failures.record(ValueError("v")).request_id == ""  # no request: none named


def test_a_path_is_shown_from_the_import_root_it_was_found_under(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "path", ["/srv/site-packages", "/srv", "relative"])
    path = os.sep.join(["", "srv", "site-packages", "mypkg", "rollout.py"])
    assert failures.short_path(path) == os.path.join("mypkg", "rollout.py")
    assert failures.short_path("/other/place.py") == "/other/place.py"


@pytest.mark.parametrize(
    ("module", "user"),
    [
        ("mypkg.rollout", True),
        ("artfleet_guess_number.rollout", True),  # a plugin may be named so (examples/)
        ("__main__", True),
        ("artfleet_rollout.group", False),
        ("artfleet.clients.episode", False),
        ("asyncio.tasks", False),
        ("art.model", False),
        ("httpx._client", False),
        # ART applies nest_asyncio on import: its run_until_complete wraps the loop's
        ("nest_asyncio", False),
    ],
)
def test_which_modules_are_the_users(module: str, user: bool) -> None:
    assert failures.is_user_module(module) is user
