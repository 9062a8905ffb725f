"""Heuristics on a shell command's text: does it modify files, does it look for tests?

They feed the process-reward rows "code modified" and "tests discovered". They read the
command only, never the workspace, so they have known limits:

- what a program does inside is invisible: `python script.py` or `make` writing files,
  shell functions, aliases and commands named by variables count as neither;
- writes to /dev/null or to file descriptors (`2>&1`) are not modifications;
- installing packages (pip, apt) changes the environment, not the workspace: not counted;
- tests are recognised by name (`test`, `tests/`, `test_x.py`, `conftest`, runners such as
  pytest), so grepping a text file for the word "test" counts as looking for tests;
- heredoc bodies are tokenised like commands, which may add a false positive.

A sandbox that diffs the workspace could later replace the first guess with a fact.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_OPERATOR_CHARS = "();<>|&\n"
_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>"})
_NULL_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
_MAX_DEPTH = 3  # `sh -c "bash -c '...'"` nests; deeper than this is not worth reading

# Words that run the next word as the command (`sudo rm x`, `timeout 5 pytest`, `do mv ...`).
_WRAPPERS = _words(
    "sudo doas env command builtin exec nohup time nice timeout stdbuf xargs then do else "
    "elif if while until ! {"
)
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_WRAPPER_ARG = re.compile(r"^(-.*|\d+(\.\d+)?[smhd]?)$")  # options, counts, durations
_PYTHON = re.compile(r"^python[0-9.]*$")
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh"})

_ALWAYS_MODIFY = _words(
    "mv cp rm rmdir mkdir touch chmod chown chgrp ln install truncate patch rsync shred "
    "split csplit mktemp zip ed ex"
)
# Compressors write files unless they only print, list or test.
_COMPRESSORS = frozenset({"gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "unzip"})
_READ_ONLY_COMPRESS_FLAGS = frozenset(
    {"-c", "-l", "-t", "-p", "-Z", "--stdout", "--to-stdout", "--list", "--test"}
)
_GIT_MODIFY = _words(
    "apply am checkout restore mv rm reset stash merge rebase cherry-pick revert pull "
    "clone init switch"
)
_IN_PLACE_FLAG = re.compile(r"^(-[^-]*i|--in-place)")  # sed -i, sed -Ei.bak, perl -pi
_PY_WRITES = re.compile(
    r"open\([^)]*,\s*(?:mode\s*=\s*)?['\"][rbt]*[wax+]"
    r"|\.write_(?:text|bytes)\("
    r"|\bos\.(?:remove|unlink|rename|replace|makedirs|mkdir|rmdir|chmod)\("
    r"|\bshutil\.(?:copy\w*|move|rmtree)\("
    r"|\.(?:touch|mkdir|unlink)\("
)

_TEST_NAME = re.compile(r"(?<![a-zA-Z])[Tt]ests?(?![a-z])|conftest|pytest|unittest")
_TEST_RUNNERS = _words(
    "pytest py.test tox nox nosetests nose2 bats phpunit jest mocha rspec ctest trial"
)
_PYTHON_TEST_MODULES = frozenset({"pytest", "unittest", "nose", "nose2", "doctest", "tox"})
_MAKE_TEST_TARGETS = frozenset({"test", "tests", "check", "test-all", "unittest"})
_TOOLCHAINS_WITH_TEST = frozenset(
    {"go", "cargo", "mvn", "gradle", "dotnet", "mix", "deno", "bun", "npm", "yarn", "pnpm"}
)
# Commands that list, search or read files: naming tests in their arguments is looking.
_SEARCHERS = _words(
    "find ls tree grep egrep fgrep rg ag ack fd locate cat head tail less more wc file "
    "stat nl sed awk"
)


@dataclass(frozen=True)
class CommandTraits:
    """What a command probably does; `runs_tests` implies `discovers_tests`."""

    modifies_files: bool = False
    discovers_tests: bool = False
    runs_tests: bool = False

    def __or__(self, other: CommandTraits) -> CommandTraits:
        return CommandTraits(
            self.modifies_files or other.modifies_files,
            self.discovers_tests or other.discovers_tests,
            self.runs_tests or other.runs_tests,
        )


NO_TRAITS = CommandTraits()


def _strip_comments(command: str) -> str:
    """Drops `# ...` comments; a `#` inside quotes or inside a word (`${#x}`) is kept."""
    out: list[str] = []
    quote = ""
    i = 0
    while i < len(command):
        ch = command[i]
        if ch == "\\" and quote != "'":
            out.append(command[i : i + 2])
            i += 2
            continue
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or command[i - 1] in " \t" + _OPERATOR_CHARS):
            end = command.find("\n", i)
            i = len(command) if end < 0 else end
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _tokenize(command: str) -> list[str]:
    command = _strip_comments(command)
    lexer = shlex.shlex(command, posix=True, punctuation_chars=_OPERATOR_CHARS)
    lexer.whitespace = " \t\r"  # newlines separate commands: keep them as operators
    lexer.whitespace_split = True
    lexer.commenters = ""  # shlex would also cut `${#x}`; `_strip_comments` did the job
    try:
        return list(lexer)
    except ValueError:
        # Unbalanced quotes: the command will fail anyway, a rough split is enough.
        return re.findall(r"[^\s();<>|&]+|[();<>|&\n]+", command)


def _is_operator(token: str) -> bool:
    return bool(token) and all(ch in _OPERATOR_CHARS for ch in token)


def _split(tokens: list[str]) -> tuple[list[list[str]], bool]:
    """Splits tokens into simple commands' words; says whether a redirection writes a file."""
    segments: list[list[str]] = [[]]
    writes = False
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if _is_operator(token):
            if "<" in token or ">" in token:
                target = tokens[i + 1] if i + 1 < len(tokens) else ""
                writes = writes or (token in _WRITE_REDIRECTS and target not in _NULL_TARGETS)
                i += 2  # the target (or heredoc delimiter) is not a word of the command
                continue
            segments.append([])
        else:
            segments[-1].append(token)
        i += 1
    return [s for s in segments if s], writes


def _resolve(words: list[str]) -> tuple[str, list[str]]:
    """The command's name (basename, wrappers and `VAR=x` skipped) and its arguments."""
    i = 0
    while i < len(words):
        if _ASSIGNMENT.match(words[i]):
            i += 1
            continue
        name = os.path.basename(words[i])
        if name not in _WRAPPERS:
            return name, words[i + 1 :]
        i += 1
        while i < len(words) and _WRAPPER_ARG.match(words[i]):
            i += 1
    return "", []


def _tar_writes(args: list[str]) -> bool:
    if any(a in ("--create", "--extract", "--get", "--append", "--update") for a in args):
        return True
    # Bundled flags: `-czf`, `xzf` (old style, no dash) as the first argument.
    flags = [a for a in args if a.startswith("-") and not a.startswith("--")]
    if args and not args[0].startswith("-"):
        flags.append(args[0])
    return any(set(flag) & set("cxru") for flag in flags)


def _modifies(name: str, args: list[str], raw: str) -> bool:
    if name in _ALWAYS_MODIFY:
        return True
    if name in _COMPRESSORS:
        return not any(a in _READ_ONLY_COMPRESS_FLAGS for a in args)
    if name in ("sed", "perl"):
        return any(_IN_PLACE_FLAG.match(a) for a in args)
    if name in ("awk", "gawk"):
        return "inplace" in args
    if name == "tee":
        return any(not a.startswith("-") and a not in _NULL_TARGETS for a in args)
    if name == "dd":
        return any(a.startswith("of=") for a in args)
    if name == "tar":
        return _tar_writes(args)
    if name == "git":
        sub = next((a for a in args if not a.startswith("-")), "")
        return sub in _GIT_MODIFY
    if name == "find":
        return "-delete" in args
    if _PYTHON.match(name) and (not args or "-c" in args or "-" in args):
        # Inline code (`-c`, a heredoc on stdin): look for file-writing calls in the text.
        return bool(_PY_WRITES.search(raw))
    return False


def _runs_tests(name: str, args: list[str]) -> bool:
    if name in _TEST_RUNNERS:
        return True
    if _PYTHON.match(name):
        if "-m" in args and args.index("-m") + 1 < len(args):
            return args[args.index("-m") + 1] in _PYTHON_TEST_MODULES
        script = next((a for a in args if not a.startswith("-")), "")
        return bool(_TEST_NAME.search(script))  # the path: `python tests/run.py` too
    if name in _SHELLS and args and not args[0].startswith("-"):
        return bool(_TEST_NAME.search(args[0]))
    if name in ("make", "gmake", "ninja"):
        return any(a in _MAKE_TEST_TARGETS for a in args)
    if name in _TOOLCHAINS_WITH_TEST:
        return "test" in args[:2]
    # A script named like a test (`./run_tests.sh`); the `test` builtin is not one.
    return name not in ("test", "[") and bool(_TEST_NAME.search(name))


def _looks_for_tests(name: str, args: list[str]) -> bool:
    if name in _SEARCHERS or (name == "git" and args[:1] in (["grep"], ["ls-files"])):
        return any(_TEST_NAME.search(a) for a in args)
    return False


def _nested(name: str, args: list[str], depth: int) -> CommandTraits:
    """Commands inside commands: `bash -c '...'`, `find ... -exec rm {} ;`."""
    if name in _SHELLS and "-c" in args and args.index("-c") + 1 < len(args):
        return _classify(args[args.index("-c") + 1], depth + 1)
    if name == "find":
        for flag in ("-exec", "-execdir", "-ok", "-okdir"):
            if flag in args:
                inner = args[args.index(flag) + 1 :]
                return _classify_words(inner, " ".join(inner), depth + 1)
    return NO_TRAITS


def _classify_words(words: list[str], raw: str, depth: int) -> CommandTraits:
    name, args = _resolve(words)
    if not name:
        return NO_TRAITS
    runs = _runs_tests(name, args)
    traits = CommandTraits(
        modifies_files=_modifies(name, args, raw),
        discovers_tests=runs or _looks_for_tests(name, args),
        runs_tests=runs,
    )
    if depth < _MAX_DEPTH:
        traits |= _nested(name, args, depth)
    return traits


def _classify(command: str, depth: int) -> CommandTraits:
    segments, redirect_writes = _split(_tokenize(command))
    traits = CommandTraits(modifies_files=redirect_writes)
    for words in segments:
        traits |= _classify_words(words, command, depth)
    return traits


def classify_command(command: str) -> CommandTraits:
    """Guesses whether `command` modifies files and whether it looks for or runs tests."""
    return _classify(command, 0)
