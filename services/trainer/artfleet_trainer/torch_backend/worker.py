"""One dedicated thread for all of a backend's torch work.

Every thread that runs torch ops gets its own OpenMP thread team, and teams compete for
the cores: a decode step run from `asyncio.to_thread` (a pool of threads, each call
possibly on another one) is slower than the same step run always from the same thread,
and far slower when the machine is busy. So model loading, generation and training all
run on this one thread, and the event loop thread (HTTP server, job runner) never
computes with torch.

By default that thread uses one core less than the machine has. An OpenMP team waits at
a barrier for its slowest thread, so one busy core (the event loop answering HTTP, a
rollout worker, a sandbox running tests) stalls every step: on a small machine, decoding
on every core gains little when it is quiet and loses several times over with one other
busy thread. Training is compute-bound, so it takes every core when the machine is
otherwise idle, as it is while a synchronous job waits for it. The figures:
docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import torch

log = logging.getLogger(__name__)
T = TypeVar("T")


def default_num_threads() -> int:
    """All cores this process may use but one (and at least one)."""
    return max(1, available_cores() - 1)


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# vLLM's CPU worker keeps polling its queue for 1 s after its last request
# (vllm/distributed/device_communicators/shm_broadcast.py, busy_loop_s): a step starting
# right after its rollouts would read that as a busy core and train on half the cores.
SETTLE_S = 1.5


def training_threads(configured: int | None = None, settle_s: float = SETTLE_S) -> int:
    """`configured`, else all cores if other processes leave them idle, else all but one.
    A core busy at the first look is looked at again for up to `settle_s`: only a core
    that stays busy costs training a thread."""
    if configured:
        return configured
    busy = cores_busy_elsewhere()
    deadline = time.monotonic() + settle_s
    while busy is not None and busy >= 0.5 and time.monotonic() < deadline:
        busy = cores_busy_elsewhere()
    threads = default_num_threads() if busy is None or busy >= 0.5 else available_cores()
    log.info("training on %d threads (%s cores busy elsewhere)", threads, busy)
    return threads


def cores_busy_elsewhere(interval_s: float = 0.2) -> float | None:
    """How many cores other processes keep busy now (Linux /proc/stat); None if unknown.

    The 1-minute load average lags and counts this process's own recent generation, so
    busy time is sampled over a short interval, minus this process's CPU time.
    """
    try:
        total_before, idle_before = _cpu_ticks()
        own_before = time.process_time()
        time.sleep(interval_s)
        total_after, idle_after = _cpu_ticks()
        own_after = time.process_time()
    except (OSError, ValueError, IndexError):
        return None
    busy_s = ((total_after - total_before) - (idle_after - idle_before)) / os.sysconf("SC_CLK_TCK")
    return max(0.0, busy_s - (own_after - own_before)) / interval_s


def _cpu_ticks() -> tuple[int, int]:
    """(all, idle + iowait) jiffies since boot, summed over cores."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    return sum(fields), fields[3] + fields[4]


def training_thread_scope(
    device: str | torch.device, configured: int | None = None
) -> contextlib.AbstractContextManager[None]:
    """The intra-op threads a training step or SFT batch runs with. Only a CPU step asks
    how busy the cores are (up to `SETTLE_S` of sampling: longer than a small model's
    whole step on a GPU, where host threads only launch kernels)."""
    if torch.device(device).type != "cpu":
        return contextlib.nullcontext()
    return torch_threads(training_threads(configured))


@contextlib.contextmanager
def torch_threads(num_threads: int) -> Iterator[None]:
    """Run a block with `num_threads` intra-op threads (on the calling thread)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _init_thread(num_threads: int | None) -> None:
    # Set on the worker itself: OpenMP's thread count is a per-thread setting.
    torch.set_num_threads(num_threads or default_num_threads())


class TorchWorker:
    def __init__(
        self,
        num_threads: int | None = None,
        translate: Callable[[BaseException], BaseException | None] | None = None,
    ) -> None:
        """`translate`: what the caller gets instead of an error the work raised (None:
        the error itself); the trainer's ranks turn a broken group into `Unavailable`."""
        self._executor = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="artfleet-torch",
            initializer=_init_thread,
            initargs=(num_threads,),
        )
        self._translate = translate

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` on the torch thread without blocking the event loop."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, functools.partial(fn, *args))
        except Exception as exc:
            other = self._translate(exc) if self._translate is not None else None
            if other is None:
                raise
            raise other from exc

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
