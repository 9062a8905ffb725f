"""vLLM's CPU KV cache sized from the machine's memory (artfleet_inference.cpu_memory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from artfleet.contracts.gpu_plan import GiB, MiB
from artfleet_inference.cpu_memory import (
    AUTO_CAP_BYTES,
    KvCacheError,
    KvNeed,
    MachineMemory,
    cgroup_room,
    kv_cache_bytes,
    machine_memory,
    mem_available,
)

# SmolLM2 in fp32: 0.5 GiB of weights, 90 MiB a 2048-token sequence.
NEED = KvNeed(weight_bytes=GiB // 2, sequence_bytes=90 * MiB, max_model_len=2048)


def _machine(gib: float) -> MachineMemory:
    return MachineMemory(int(gib * GiB), "MemAvailable")


def test_auto_takes_what_the_machine_gives_up_to_the_cap() -> None:
    assert kv_cache_bytes("auto", NEED, _machine(64)) == AUTO_CAP_BYTES
    # 4 GiB less weights 0.5, vLLM's processes 2, the margin 0.5: 1 GiB.
    assert kv_cache_bytes("auto", NEED, _machine(4)) == GiB


def test_auto_below_its_floor_names_the_setting() -> None:
    """~2 GB free: the old fixed 2 GiB failed deep in vLLM's log; now before it starts."""
    with pytest.raises(KvCacheError) as raised:
        kv_cache_bytes("auto", NEED, _machine(2))
    message = str(raised.value)
    assert "ARTFLEET_INFERENCE_KV_CACHE_GIB=auto" in message
    assert "MemAvailable is 2.00 GiB" in message and "ARTFLEET_INFERENCE_MAX_MODEL_LEN" in message


def test_a_number_is_kept_fractions_included() -> None:
    assert kv_cache_bytes(0.5, NEED, _machine(64)) == GiB // 2
    assert kv_cache_bytes(8.0, NEED, _machine(64)) == 8 * GiB  # no cap on a number


def test_a_number_that_does_not_fit_says_what_does() -> None:
    with pytest.raises(KvCacheError, match=r"KV_CACHE_GIB=2 does not fit.*at most 1\.00 GiB fits"):
        kv_cache_bytes(2.0, NEED, _machine(4))
    with pytest.raises(KvCacheError, match="none fits"):
        kv_cache_bytes(0.5, NEED, _machine(2))


def test_a_number_below_one_sequence_is_refused() -> None:
    with pytest.raises(KvCacheError, match=r"KV_CACHE_GIB=0\.05 holds no full sequence"):
        kv_cache_bytes(0.05, NEED, _machine(64))


def test_the_floor_rises_above_the_cap_for_long_sequences() -> None:
    long = KvNeed(weight_bytes=GiB, sequence_bytes=GiB, max_model_len=32768)
    assert kv_cache_bytes("auto", long, _machine(64)) == 4 * GiB  # KV_SEQUENCES of them


MEMINFO = "MemTotal:       24683520 kB\nMemFree:  100 kB\nMemAvailable:   2097152 kB\n"


def test_meminfo_and_cgroup_limits_are_read() -> None:
    assert mem_available(MEMINFO) == 2 * GiB
    assert cgroup_room("max\n", "123\n") is None  # v2 without a limit
    assert cgroup_room("9223372036854771712\n", "5") is None  # v1 without a limit
    assert cgroup_room(str(3 * GiB), str(GiB)) == 2 * GiB
    assert cgroup_room(str(GiB), str(2 * GiB)) == 0  # over it (page cache counts)


def test_the_tighter_of_the_machine_and_its_cgroup_wins(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/meminfo").write_text(MEMINFO)
    assert machine_memory(tmp_path) == MachineMemory(2 * GiB, "MemAvailable (/proc/meminfo)")
    v1 = tmp_path / "sys/fs/cgroup/memory"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(str(2 * GiB))
    (v1 / "memory.usage_in_bytes").write_text(str(GiB + GiB // 2))
    found = machine_memory(tmp_path)
    assert found.available == GiB // 2 and "memory.limit_in_bytes" in found.source
    v2 = tmp_path / "sys/fs/cgroup"
    (v2 / "memory.max").write_text("max\n")  # v2 first: no limit there, MemAvailable holds
    (v2 / "memory.current").write_text("0\n")
    assert machine_memory(tmp_path).available == 2 * GiB
