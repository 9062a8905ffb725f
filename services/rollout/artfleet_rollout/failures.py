"""A failed episode as the step batch carries it: its type, message, traceback and where
the user's code raised it, and the worker's log line for it.

The frames that matter to a plugin's author are their own: seen from the group runner, a
traceback goes through the fleet (`artfleet`, `artfleet_rollout`), asyncio and the
libraries between (ART, openai, httpx, anyio, ...) for a dozen frames of ours.
`user_frames` keeps the last few of the others, following a wrapped exception's cause
when the outer one was raised in our code; with no frame of the user's (a bundled agent's
failure) it keeps the fleet's last frames, where our code met the error. How a record is
counted and said on one line: `artfleet.contracts.failures`.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Iterator
from types import TracebackType

import grpc

from artfleet.contracts import failures
from artfleet.runtime.logs import request_id
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2
from artfleet_rollout import metrics

log = logging.getLogger(__name__)

FRAMES = 3  # the last frames kept: where it was raised and the calls that led there
TRACEBACK_CHARS = 16_000  # the end of a longer traceback: the innermost frames
# Top-level modules that are not the user's code, besides the stdlib: the fleet's own
# code in a rollout worker (the kernel and this service; a plugin package may well be
# named `artfleet_...`, as the examples are) and the libraries our agents and the `art`
# kind run user code through.
_FLEET = frozenset({"artfleet", "artfleet_rollout"})
_NOT_USERS = _FLEET | frozenset(
    {
        "art",
        "nest_asyncio",  # ART patches asyncio with it on import: its frames wrap the loop's
        "openai",
        "httpx",
        "httpcore",
        "anyio",
        "sniffio",
        "pydantic",
        "pydantic_core",
        "grpc",
        "mcp",
        "litellm",
        "tenacity",
        "celery",
        "kombu",
        "redis",
        "billiard",
    }
)
_CAUSES = 5  # how far down a chain of causes to look for the user's frames


def innermost(exc: BaseException) -> BaseException:
    """The exception itself, or an exception group's first leaf (an MCP session's task
    group wraps what its tasks raised)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def is_user_module(module: str) -> bool:
    top = module.partition(".")[0]
    return not (top in _NOT_USERS or top in sys.stdlib_module_names)


def _walk(tb: TracebackType | None) -> Iterator[tuple[str, str, int, str]]:
    """(module, file, line, function) of each frame, outermost first."""
    while tb is not None:
        frame = tb.tb_frame
        yield (
            str(frame.f_globals.get("__name__", "")),
            frame.f_code.co_filename,
            tb.tb_lineno,
            frame.f_code.co_name,
        )
        tb = tb.tb_next


def short_path(path: str) -> str:
    """A file's path from the import root it was found under (`mypkg/rollout.py`): what
    the author recognises, without the machine's site-packages prefix."""
    roots = sorted((p for p in sys.path if p and os.path.isabs(p)), key=len, reverse=True)
    for root in roots:
        prefix = root.rstrip(os.sep) + os.sep
        if path.startswith(prefix):
            return path[len(prefix) :]
    return path


def _format(frames: list[tuple[str, str, int, str]]) -> list[str]:
    return [f"{short_path(file)}:{line} in {name}" for _, file, line, name in frames[-FRAMES:]]


def _cause(exc: BaseException) -> BaseException | None:
    if exc.__cause__ is not None:
        return exc.__cause__
    return None if exc.__suppress_context__ else exc.__context__


def user_frames(exc: BaseException) -> list[str]:
    """The last FRAMES frames of the user's code where `exc` was raised, innermost last
    ("path:line in function"). None of the user's (a bundled agent's failure): the
    fleet's own last frames, then the traceback's."""
    current: BaseException | None = exc
    for _ in range(_CAUSES):
        if current is None:
            break
        mine = [f for f in _walk(current.__traceback__) if is_user_module(f[0])]
        if mine:
            return _format(mine)
        current = _cause(current)
    frames = list(_walk(exc.__traceback__))
    ours = [f for f in frames if f[0].partition(".")[0] in _FLEET]
    return _format(ours or frames)


def _message(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):  # its str() is a multi-line repr
        return f"{exc.code().name}: {exc.details()}"
    return str(exc)


def record(exc: BaseException, episodes: int = 0) -> pb.RolloutException:
    """The failure as the group result and the step batch carry it."""
    leaf = innermost(exc)
    text = "".join(traceback.format_exception(exc))
    rid = request_id.get()
    return pb.RolloutException(
        type=type(leaf).__name__,
        message=_message(leaf),
        traceback=text[-TRACEBACK_CHARS:],
        frames=user_frames(leaf),
        episodes=episodes,
        request_id="" if rid == "-" else rid,
    )


def logged(
    task: rollout_pb2.GroupTask, exc: BaseException, what: str, episodes: int = 0
) -> pb.RolloutException:
    """Record `exc`, count it by type and log it with the job, step and group (the log
    line's request id is the run's: the failure record names it too)."""
    failure = record(exc, episodes)
    metrics.EPISODE_FAILURES.labels(metrics.failure_type(failure.type)).inc(
        failures.episodes(failure)
    )
    log.warning(
        "%s of job %s step %d group %s failed: %s",
        what,
        task.job_id,
        task.step,
        task.group_id,
        failures.describe(failure),
        exc_info=exc,
    )
    return failure
