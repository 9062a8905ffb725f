"""vLLM's CPU KV cache sized from the memory this machine can give, checked before vLLM
starts (a KV cache that does not fit fails minutes later, deep in vLLM's log, or gets its
Worker OOM-killed).

vLLM's CPU build takes the size in bytes (`--kv-cache-memory-bytes`); its legacy
VLLM_CPU_KVCACHE_SPACE takes whole GiB only (`int()`: 0.5 crashes it) and overrides the
flag, so it is never set. `ARTFLEET_INFERENCE_KV_CACHE_GIB` (settings.py) is a number of
GiB, fractions allowed, or `auto`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from artfleet.contracts.gpu_plan import KV_SEQUENCES, GiB, MiB

SETTING = "ARTFLEET_INFERENCE_KV_CACHE_GIB"
# `auto`'s most: the fixed default it replaces; the trainer, the sandboxes and the rollout
# workers share the machine, and more than a few sequences' worth sits unused.
AUTO_CAP_BYTES = 2 * GiB
# vLLM's processes besides the weights and the KV cache (measured with SmolLM2 on this
# CPU build, PSS: the API server 0.6 GiB, EngineCore 0.5, the Worker's torch 0.8).
VLLM_PROCESSES_BYTES = 2 * GiB
MARGIN_BYTES = 512 * MiB  # left to the rest of the machine
_NO_LIMIT = 1 << 60  # cgroup v1 writes "no limit" as a huge number


class KvCacheError(ValueError):
    """The KV cache cannot fit; the message names the setting."""


@dataclass(frozen=True)
class MachineMemory:
    available: int  # bytes a new process may take
    source: str  # where it was read (in error messages)


@dataclass(frozen=True)
class KvNeed:
    """What vLLM needs besides its KV cache, and the least KV cache it can work with."""

    weight_bytes: int
    sequence_bytes: int  # one sequence of max_model_len tokens: vLLM refuses less
    max_model_len: int

    @property
    def fixed_bytes(self) -> int:
        return self.weight_bytes + VLLM_PROCESSES_BYTES + MARGIN_BYTES

    @property
    def floor_bytes(self) -> int:
        """`auto`'s least: KV_SEQUENCES full-length sequences (gpu_plan's measure)."""
        return KV_SEQUENCES * self.sequence_bytes


def _gib(n: int) -> str:
    return f"{n / GiB:.2f} GiB"


def kv_cache_bytes(setting: float | Literal["auto"], need: KvNeed, memory: MachineMemory) -> int:
    """The KV cache vLLM gets: the setting, or `auto`'s room (at most AUTO_CAP_BYTES unless
    the floor needs more); KvCacheError when it cannot fit."""
    room = memory.available - need.fixed_bytes
    besides = (
        f"{memory.source} is {_gib(memory.available)}; vLLM takes {_gib(need.fixed_bytes)} "
        f"besides its KV cache (weights {_gib(need.weight_bytes)}, its processes "
        f"{_gib(VLLM_PROCESSES_BYTES)}, {_gib(MARGIN_BYTES)} left to the rest)"
    )
    one = f"one sequence of {need.max_model_len} tokens is {_gib(need.sequence_bytes)}"
    if setting == "auto":
        if room < need.floor_bytes:
            raise KvCacheError(
                f"{SETTING}=auto: the KV cache needs at least {_gib(need.floor_bytes)} "
                f"({KV_SEQUENCES} sequences of {need.max_model_len} tokens) and does not "
                f"fit: {besides}. Free memory, or set {SETTING} to a number of GiB "
                f"(fractions allowed; {one}) or a shorter ARTFLEET_INFERENCE_MAX_MODEL_LEN"
            )
        return min(room, max(AUTO_CAP_BYTES, need.floor_bytes))
    wanted = int(setting * GiB)
    if wanted < need.sequence_bytes:
        raise KvCacheError(
            f"{SETTING}={setting:g} holds no full sequence ({one}; vLLM refuses to start): "
            "set it higher, or a shorter ARTFLEET_INFERENCE_MAX_MODEL_LEN"
        )
    if wanted > room:
        fits = f"at most {room / GiB:.2f} GiB fits" if room > 0 else "none fits"
        raise KvCacheError(
            f"{SETTING}={setting:g} does not fit: {besides}; {fits}. Set {SETTING} lower "
            "or to auto, or free memory"
        )
    return wanted


def mem_available(meminfo: str) -> int:
    """/proc/meminfo's MemAvailable, in bytes."""
    for line in meminfo.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise ValueError("no MemAvailable in /proc/meminfo")


def cgroup_room(limit: str, usage: str) -> int | None:
    """A cgroup's limit less its usage; None without a limit ("max", or v1's huge one)."""
    limit = limit.strip()
    if limit == "max" or int(limit) >= _NO_LIMIT:
        return None
    return max(int(limit) - int(usage.strip()), 0)


def machine_memory(root: Path = Path("/")) -> MachineMemory:
    """The memory a new process may take here: MemAvailable, or the room left in this
    process's cgroup (v2, else v1) when that is less."""
    found = MachineMemory(
        mem_available((root / "proc/meminfo").read_text()), "MemAvailable (/proc/meminfo)"
    )
    cgroup = root / "sys/fs/cgroup"
    for limit, usage in (
        (cgroup / "memory.max", cgroup / "memory.current"),
        (cgroup / "memory/memory.limit_in_bytes", cgroup / "memory/memory.usage_in_bytes"),
    ):
        try:
            room = cgroup_room(limit.read_text(), usage.read_text())
        except (OSError, ValueError):
            continue
        if room is not None and room < found.available:
            found = MachineMemory(room, f"the room in this cgroup's memory limit ({limit})")
        break
    return found
