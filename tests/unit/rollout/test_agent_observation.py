"""format_observation and head+tail truncation."""

from __future__ import annotations

from artfleet_rollout.agents.terminal import format_observation, truncate_middle


def test_short_outputs_are_shown_whole() -> None:
    text = format_observation(0, "hello\n", "", False, 100)
    assert text == "exit_code: 0\nstdout:\nhello\nstderr: (empty)"


def test_timeout_and_stderr() -> None:
    text = format_observation(124, "", "boom", True, 100)
    assert text.startswith("exit_code: 124 (timed out")
    assert "stdout: (empty)" in text
    assert text.endswith("stderr:\nboom")


def test_bytes_are_decoded() -> None:
    text = format_observation(1, b"caf\xc3\xa9", b"\xff", False, 100)
    assert "café" in text
    assert "\ufffd" in text


def test_truncation_keeps_head_and_tail_and_counts_the_cut() -> None:
    text = "A" * 50 + "B" * 100 + "C" * 50
    cut = truncate_middle(text, 100)
    assert cut.startswith("A" * 50)
    assert cut.endswith("C" * 50)
    assert "[... 100 chars cut ...]" in cut
    assert "B" not in cut


def test_truncation_odd_limit_and_exact_fit() -> None:
    assert truncate_middle("abcdef", 6) == "abcdef"
    cut = truncate_middle("abcdefg", 3)
    assert cut == "a\n[... 4 chars cut ...]\nfg"


def test_zero_limit_means_unlimited() -> None:
    assert truncate_middle("x" * 1000, 0) == "x" * 1000


def test_each_stream_is_truncated_separately() -> None:
    text = format_observation(0, "o" * 500, "e" * 500, False, 40)
    assert text.count("[... 460 chars cut ...]") == 2
    assert len(text) < 200
