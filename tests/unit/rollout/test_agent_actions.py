"""parse_action: the THOUGHT + one fenced bash block format, and what it tells the model."""

from __future__ import annotations

import pytest

from artfleet_rollout.agents.terminal import FORMAT_HELP, parse_action


def test_valid_bash_action() -> None:
    action = parse_action("THOUGHT: list the files\n```bash\nls -la\n```")
    assert action.kind == "bash"
    assert action.command == "ls -la"
    assert action.thought == "list the files"
    assert action.error == ""
    assert action.valid


def test_multiline_command_and_text_after_block() -> None:
    text = "THOUGHT: two steps\n```bash\ncd src &&\n  ls\n```\nThat should do it."
    action = parse_action(text)
    assert action.kind == "bash"
    assert action.command == "cd src &&\n  ls"


def test_sh_fence_is_accepted() -> None:
    action = parse_action("THOUGHT: greet\n```sh\necho hi\n```")
    assert (action.kind, action.command) == ("bash", "echo hi")


def test_submit() -> None:
    action = parse_action("THOUGHT: the file exists, done.\n```bash\nsubmit\n```")
    assert action.kind == "submit"
    assert action.valid


def test_submit_with_more_is_a_plain_command() -> None:
    # Only the bare command `submit` ends the episode; anything else is run as bash.
    assert parse_action("THOUGHT: x\n```bash\nsubmit now\n```").kind == "bash"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("```bash\nls\n```", "THOUGHT"),
        ("I will list files.\n```bash\nls\n```", "THOUGHT"),
        ("THOUGHT: a\n```bash\nls\n```\n```bash\npwd\n```", "2 code blocks"),
        ("THOUGHT: a\n```bash\nls\n```bash\npwd\n```", "2 code blocks"),
        ("THOUGHT: nothing to run", "no ```bash code block"),
        ("", "no ```bash code block"),
        ("THOUGHT: a\n```python\nprint(1)\n```", "must be ```bash, not python"),
        ("THOUGHT: a\n```\nls\n```", "must be ```bash, not no language"),
        ("THOUGHT: a\n```bash\nls -la\n", "not closed"),
        ("THOUGHT: a\n```bash\n\n```", "empty"),
        ("```bash\nls\n```\nTHOUGHT: after", "THOUGHT"),
    ],
)
def test_invalid_formats_explain_the_expected_format(text: str, reason: str) -> None:
    action = parse_action(text)
    assert action.kind == "invalid"
    assert not action.valid
    assert reason in action.error
    assert FORMAT_HELP in action.error  # the observation shows the exact format


def test_thought_is_kept_on_language_errors() -> None:
    action = parse_action("THOUGHT: run it\n```python\nprint(1)\n```")
    assert action.thought == "run it"


def test_think_tags_are_ignored() -> None:
    text = "<think>maybe ```bash\nrm -rf /\n```</think>\nTHOUGHT: look\n```bash\nls\n```"
    action = parse_action(text)
    assert (action.kind, action.command) == ("bash", "ls")


def test_indented_fences_and_surrounding_whitespace() -> None:
    action = parse_action("  THOUGHT: hi\n  ```bash\n  echo hi\n  ```\n")
    assert (action.kind, action.command) == ("bash", "echo hi")
