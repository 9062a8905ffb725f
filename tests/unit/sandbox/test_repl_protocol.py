"""The pure REPL protocol: frames and sentinel scanning, byte by byte."""

from __future__ import annotations

import base64
import subprocess

import pytest

from artfleet_sandbox import repl

TOKEN = "__ARTFLEET_END_" + "ab" * 16 + "__"


def scan(chunks: list[bytes], with_status: bool) -> tuple[bytes, repl.SentinelScanner]:
    scanner = repl.SentinelScanner(TOKEN, with_status)
    out = b"".join(scanner.feed(chunk) for chunk in chunks)
    return out, scanner


def test_frame_is_one_line_and_round_trips() -> None:
    text = "echo 'a\nb' ; done; \"$x\" \\' \\x41 \r\t\x01\x7f é"
    line = repl.frame(TOKEN, text, b"\x00in")
    assert line.count(b"\n") == 1 and line.endswith(b"\n")
    token, stdin, quoted = line[:-1].split(b" ", 2)
    assert token.decode() == TOKEN and base64.b64decode(stdin) == b"\x00in"
    # bash reads the quoted word back as the text, byte for byte
    echo = ["bash", "--norc", "-c", 'eval "v=$1"; printf %s "$v"', "t", quoted.decode()]
    assert subprocess.run(echo, capture_output=True, check=True).stdout == text.encode()
    assert repl.frame(TOKEN, "true") == f"{TOKEN} - $'true'\n".encode()  # stdin: /dev/null


def test_a_script_with_nul_has_no_frame() -> None:
    with pytest.raises(ValueError, match="NUL"):
        repl.frame(TOKEN, "echo \x00")


@pytest.mark.parametrize("size", [1, 2, 7, 1000])
def test_sentinel_found_across_any_split(size: int) -> None:
    data = b"out\x00put no newline" + TOKEN.encode() + b"42\nlater"
    chunks = [data[i : i + size] for i in range(0, len(data), size)]
    out, scanner = scan(chunks, with_status=True)
    assert out == b"out\x00put no newline" and scanner.done and scanner.status == 42
    assert scanner.rest == b"later"


def test_stderr_sentinel_and_empty_output() -> None:
    out, scanner = scan([TOKEN.encode() + b"\n"], with_status=False)
    assert out == b"" and scanner.done and scanner.status is None


def test_a_token_without_its_status_is_output() -> None:
    out, scanner = scan([TOKEN.encode() + b"x\n", b"more"], with_status=True)
    assert not scanner.done and out + scanner.flush() == TOKEN.encode() + b"x\nmore"


def test_partial_marker_is_held_then_flushed_at_eof() -> None:
    out, scanner = scan([b"abc" + TOKEN.encode()[:5]], with_status=True)
    assert out == b"abc" and scanner.flush() == TOKEN.encode()[:5]


def test_script_env_and_cwd() -> None:
    text = repl.script("ls", "/w/a b", {"K": "v w"})
    assert text.startswith("export K='v w'\n") and "cd -- '/w/a b'" in text
    assert repl.script("ls") == "ls"
    assert repl.new_token() != repl.new_token()
