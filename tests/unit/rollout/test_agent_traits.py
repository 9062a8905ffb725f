"""classify_command heuristics for the "code modified" and "tests discovered" rows."""

from __future__ import annotations

import pytest

from artfleet_rollout.agents.terminal import classify_command


@pytest.mark.parametrize(
    "command",
    [
        "echo hello > hello.txt",
        "echo done >> todo.txt",
        "cat > f.py <<'EOF'\nprint(1)\nEOF",
        "ls 2> errors.log",
        "sed -i 's/a/b/' f.txt",
        "sed -Ei.bak 's/a/b/' f.txt",
        "perl -pi -e 's/a/b/' f.txt",
        "echo hi | tee out.txt",
        "mv a b",
        "cp a b",
        "rm -f junk.tmp",
        "mkdir -p a/b/c",
        "touch x",
        "chmod +x run.sh",
        "ln -s a b",
        "patch -p1 < fix.diff",
        "git apply fix.diff",
        "git checkout -- file.py",
        "tar -czf backup.tar.gz site",
        "tar xzf backup.tar.gz",
        "gzip data.txt",
        'python3 -c \'open("a.txt", "w").write("x")\'',
        "python -c \"import pathlib; pathlib.Path('a').write_text('x')\"",
        "python3 - <<'EOF'\nimport os\nos.remove('x')\nEOF",
        "find tmp -type f -size 0 -exec rm {} +",
        "find . -name '*.pyc' -delete",
        "find . -name '*.pyc' | xargs rm",
        "bash -c 'rm x'",
        "cd src && touch new.py",
        'for f in *.jpeg; do mv "$f" "${f%.jpeg}.jpg"; done',
        "sudo rm x",
        "FOO=1 cp a b",
        "dd if=/dev/zero of=blob bs=1 count=1",
        "awk -i inplace '{print}' f",
    ],
)
def test_modifies_files(command: str) -> None:
    assert classify_command(command).modifies_files


@pytest.mark.parametrize(
    "command",
    [
        "ls -la",
        "cat hello.txt",
        "ls 2>/dev/null",
        "make 2>&1",
        "grep -r TODO src > /dev/null",
        "sed 's/a/b/' f.txt",
        "python3 -c 'print(open(\"data.txt\").read())'",
        "python3 script.py",  # limit: what a script does is invisible
        "tar -tzf backup.tar.gz",
        "gzip -c data.txt",
        "git status",
        "git diff",
        "echo '# not a comment' && ls",
        "wc -l < data.txt",
        "tee",
        "echo hi | tee /dev/null",
    ],
)
def test_does_not_modify_files(command: str) -> None:
    assert not classify_command(command).modifies_files


def test_quoted_hash_is_not_a_comment() -> None:
    assert classify_command("echo '# title' > README.md").modifies_files


def test_real_comment_is_ignored() -> None:
    assert not classify_command("ls # then rm everything").modifies_files


@pytest.mark.parametrize(
    "command",
    [
        "pytest -q",
        "python -m pytest tests/",
        "python3 -m unittest discover",
        "python3 test_calc.py",
        "py.test",
        "timeout 60 pytest -x",
        "make test",
        "npm test",
        "npm run test",
        "go test ./...",
        "cargo test",
        "./run_tests.sh",
        "bash tests/run.sh",
        "tox -e py311",
    ],
)
def test_runs_tests(command: str) -> None:
    traits = classify_command(command)
    assert traits.runs_tests
    assert traits.discovers_tests


@pytest.mark.parametrize(
    "command",
    [
        "find . -name 'test_*.py'",
        "ls tests/",
        "ls -R | grep test",
        "grep -rn 'def test' .",
        "cat tests/test_calc.py",
        "git ls-files | grep -i test",
        "git grep TestCase",
        "cat conftest.py",
        "head -n 20 calc_test.go",
    ],
)
def test_discovers_tests_without_running(command: str) -> None:
    traits = classify_command(command)
    assert traits.discovers_tests
    assert not traits.runs_tests


@pytest.mark.parametrize(
    "command",
    [
        "ls",
        "ls latest",  # "test" inside a word is not a test
        "test -f hello.txt && echo ok",  # the shell builtin
        "[ -f x ]",
        "echo testing",
        "python3 square.py 7",
        "cat contest.txt",
        "make",
    ],
)
def test_does_not_discover_tests(command: str) -> None:
    assert not classify_command(command).discovers_tests


def test_unbalanced_quotes_do_not_raise() -> None:
    traits = classify_command("echo 'oops > out.txt")
    assert traits.modifies_files  # the rough fallback still sees the redirection


def test_nested_shells_have_a_depth_limit() -> None:
    deep = 'sh -c "sh -c \'sh -c \\"sh -c rm\\"\'"'
    classify_command(deep)  # must not recurse without end
