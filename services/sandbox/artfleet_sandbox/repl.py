"""The REPL protocol, pure: the driver loop bash runs, the frame of a call, the sentinels.

One long-lived bash per session reads one line per call from its stdin:

    <token> <base64 of the command's stdin, or -> $'<the script, ANSI-C quoted>'

and `eval`s the script in the current shell, so `cd`, exported variables, functions and
background jobs persist. The quoting keeps the command text from breaking out of its
frame (newlines, quotes, a stray `done`): backslash, quote and control characters are
escaped, so the quoted word ends at its last quote and the line at its newline. The
shell turns it back into the script with builtins only (an assignment `eval`ed), so a
call forks nothing but the command itself; base64 cost a fork and an exec per call.
The command's stdin is /dev/null (or the bytes the call sent), never the protocol
stream: a command that reads stdin gets EOF, not a hang.

After the command the driver writes `<token><exit status>\\n` to stdout and `<token>\\n`
to stderr, on descriptors saved at start (so `exec >file` in a command cannot swallow
them). The token is random per call: output before it is the command's, byte for byte
(binary, empty, no trailing newline). A command could print a forged sentinel only by
reading the token from the shell's variables, which fools nobody but its own result.
"""

from __future__ import annotations

import base64
import re
import secrets
import shlex
from collections.abc import Mapping

REPL_NAME = "artfleet-repl"  # $0 of the shell: `ps` shows which process is the REPL

# Builtins are called through `builtin` and utilities through `command -p`: a command
# may define functions named `printf` or `read`, or set PATH to nothing, and the loop
# must still work. Descriptors 62 and 63 keep the real stdout and stderr.
DRIVER = r"""exec 62>&1 63>&2
while IFS=' ' builtin read -r __af_tok __af_in __af_cmd; do
  __af_src=/dev/null
  if builtin test "$__af_in" != -; then
    __af_src=${TMPDIR:-/tmp}/.artfleet-stdin-$__af_tok
    builtin printf %s "$__af_in" | command -p base64 -d >"$__af_src"
  fi
  builtin eval "__af_cmd=$__af_cmd"
  builtin eval "$__af_cmd" <"$__af_src" 62>&- 63>&-
  __af_rc=$?
  builtin test "$__af_src" = /dev/null || command -p rm -f -- "$__af_src"
  builtin printf '%s%d\n' "$__af_tok" "$__af_rc" >&62
  builtin printf '%s\n' "$__af_tok" >&63
done
"""

_TOKEN_RE = re.compile(rb"^(\d+)\n")


def shell_argv(bash: str = "bash") -> list[str]:
    """argv of the REPL shell: no profile or rc files, the driver as its script."""
    return [bash, "--noprofile", "--norc", "-c", DRIVER, REPL_NAME]


# Images without bash get a clear message instead of a silent hang: the REPL ends at once.
DOCKER_LAUNCHER = (
    "command -v bash >/dev/null 2>&1 || "
    '{ echo "this image has no bash: use exec mode STATELESS" >&2; exit 127; }; '
    'exec bash --noprofile --norc -c "$1" ' + REPL_NAME
)


def docker_argv() -> list[str]:
    return ["/bin/sh", "-c", DOCKER_LAUNCHER, "sh", DRIVER]


def new_token() -> str:
    return f"__ARTFLEET_END_{secrets.token_hex(16)}__"


def script(command: str, cwd: str = "", env: Mapping[str, str] | None = None) -> str:
    """The text the shell evals: per-call env exports and cwd first, then the command.

    `env` persists like an `export` typed into a terminal. `cwd` holds for this call only:
    the shell goes back to where it was afterwards, unless the command itself moved.
    """
    lines = [f"export {key}={shlex.quote(value)}" for key, value in (env or {}).items()]
    if not cwd:
        return "\n".join([*lines, command])
    there = shlex.quote(cwd)
    lines += [
        f"__af_back=$PWD; builtin cd -- {there} && builtin eval {shlex.quote(command)}",
        "__af_st=$?",
        f'builtin test "$PWD" != {there} || builtin cd -- "$__af_back"',
        "(exit $__af_st)",
    ]
    return "\n".join(lines)


# Inside $'...' only backslash and the quote are special; control characters (newline
# above all) become \xHH escapes (bash reads at most two hex digits), the rest stays.
_ANSI_C = str.maketrans(
    {"\\": "\\\\", "'": "\\'"} | {chr(c): f"\\x{c:02x}" for c in [*range(1, 32), 127]}
)


def ansi_c_quoted(text: str) -> str:
    """`text` as one bash word, $'...', on one line. NUL cannot be in a shell string."""
    if "\0" in text:
        raise ValueError("a shell script cannot hold a NUL character")
    return "$'" + text.translate(_ANSI_C) + "'"


def frame(token: str, text: str, stdin: bytes = b"") -> bytes:
    """One call, as the line the driver reads."""
    data = base64.b64encode(stdin).decode() if stdin else "-"
    return f"{token} {data} {ansi_c_quoted(text)}\n".encode()


class SentinelScanner:
    """Finds a call's end in one stream as bytes arrive, passing on the bytes before it.

    `feed` returns what is surely the command's output; a tail that could be the start of
    the sentinel is held back until the next piece decides. After the sentinel, `done` is
    set, `status` holds the number the stdout sentinel carries, and bytes that followed it
    (a background job's output) are in `rest`.
    """

    def __init__(self, token: str, with_status: bool) -> None:
        self._marker = token.encode()
        self._with_status = with_status
        self._held = bytearray()
        self.done = False
        self.status: int | None = None
        self.rest = b""

    def feed(self, data: bytes) -> bytes:
        if self.done:
            self.rest += data
            return b""
        self._held += data
        at = self._held.find(self._marker)
        if at < 0:
            keep = _partial_suffix(self._held, self._marker)
            out = bytes(self._held[: len(self._held) - keep])
            del self._held[: len(out)]
            return out
        after = bytes(self._held[at + len(self._marker) :])
        if self._with_status:
            match = _TOKEN_RE.match(after)
            if match is None:
                if b"\n" in after or len(after) > 16:  # not a status: a forged or broken one
                    return self._not_a_sentinel(at)
                out = bytes(self._held[:at])
                del self._held[:at]
                return out  # wait for the status digits and the newline
            self.status = int(match.group(1))
            after = after[match.end() :]
        elif after[:1] == b"\n":
            after = after[1:]
        elif after:
            return self._not_a_sentinel(at)
        else:
            out = bytes(self._held[:at])
            del self._held[:at]
            return out
        out = bytes(self._held[:at])
        self._held.clear()
        self.done = True
        self.rest = after
        return out

    def _not_a_sentinel(self, at: int) -> bytes:
        # The token followed by something else: pass it on as output and look further.
        cut = at + len(self._marker)
        out = bytes(self._held[:cut])
        del self._held[:cut]
        return out + self.feed(b"")

    def flush(self) -> bytes:
        """At EOF: whatever was held back was output after all."""
        out = bytes(self._held)
        self._held.clear()
        return out


def _partial_suffix(data: bytearray, marker: bytes) -> int:
    """Length of the longest suffix of `data` that is a proper prefix of `marker`."""
    for size in range(min(len(marker) - 1, len(data)), 0, -1):
        if data.endswith(marker[:size]):
            return size
    return 0
