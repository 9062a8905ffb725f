"""How vLLM ended, read from its API server's status and its log
(artfleet_inference.vllm_exit), and the process group's bookkeeping."""

from __future__ import annotations

from pathlib import Path

from artfleet_inference.process_group import group_members, parse_stat
from artfleet_inference.vllm_exit import ChildEnd, LogTail, VllmEnd, first_child_end
from artfleet_inference.vllm_main import CHILD_EXIT_MARK

# What vLLM's log held when the OOM killer took the Worker: the API server then exited 0.
MARK = CHILD_EXIT_MARK
OOM_LOG = f"""\
(APIServer pid=100) INFO 12-06 21:01:51 [api_server.py:1] Starting vLLM API server
(EngineCore pid=200) ERROR 12-06 21:02:01 [multiproc_executor.py:316] Worker proc VllmWorker-0 \
died unexpectedly (exit code: -9), shutting down executor.
(EngineCore pid=200) {MARK} name=VllmWorker-0 pid=300 exitcode=-9
(APIServer pid=100) {MARK} name=EngineCore_DP0 pid=200 exitcode=1
"""


def test_the_first_child_that_died_is_the_cause() -> None:
    assert first_child_end(OOM_LOG) == ChildEnd("VllmWorker-0", None, -9)  # vLLM's line first
    marks_only = "\n".join(line for line in OOM_LOG.splitlines() if CHILD_EXIT_MARK in line)
    assert first_child_end(marks_only) == ChildEnd("VllmWorker-0", 300, -9)
    assert first_child_end("(APIServer pid=1) INFO all is well\n") is None


def test_a_killed_child_is_reported_by_signal_and_exits_128_plus_it() -> None:
    end = VllmEnd(100, 0, ChildEnd("EngineCore_DP0", 200, -9))
    assert end.exit_status() == 137  # was 0: "vLLM exited with 0"
    line = end.describe()
    assert line.startswith("vLLM died: its EngineCore_DP0 (pid 200) was killed by SIGKILL")
    assert "OOM killer" in line and "API server (pid 100) exited with 0" in line


def test_the_api_servers_own_end_when_no_child_died() -> None:
    assert VllmEnd(100, -9).exit_status() == 137
    assert "was killed by SIGKILL" in VllmEnd(100, -9).describe()
    assert VllmEnd(100, 3).exit_status() == 3
    assert VllmEnd(100, 0).exit_status() == 1  # vLLM ending by itself is a fault too
    assert VllmEnd(100, None, ChildEnd("EngineCore_DP0", 2, 1)).exit_status() == 1
    assert "still ran" in VllmEnd(100, None, ChildEnd("EngineCore_DP0", 2, -15)).describe()


def test_the_tail_reads_only_new_complete_lines(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("an earlier start's line\n")
    tail = LogTail(log)
    assert tail.read() == ""
    with open(log, "a") as f:
        f.write(f"{CHILD_EXIT_MARK} name=EngineCore_DP0 pid=2 exit")
    assert tail.read() == ""  # half a line waits for its end
    with open(log, "a") as f:
        f.write("code=-9\nnext")
    assert first_child_end(tail.read()) == ChildEnd("EngineCore_DP0", 2, -9)
    assert "earlier" not in tail.text


def test_stat_lines_are_parsed_past_odd_names() -> None:
    assert parse_stat("42 (VLLM::Engine) Core) S 1 77 77 0 -1") == ("S", 77)


def test_group_members_skip_zombies_and_other_groups(tmp_path: Path) -> None:
    for pid, stat in {
        "10": "10 (python) S 1 10 10",
        "11": "11 (VLLM::EngineCore) R 10 10 10",
        "12": "12 (python) Z 10 10 10",  # dead, only not reaped
        "13": "13 (bash) S 1 13 13",
    }.items():
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "stat").write_text(stat)
    (tmp_path / "self").mkdir()
    assert sorted(group_members(10, tmp_path)) == [10, 11]
