"""`eval run --model` given a path: said what to type before any service is asked."""

from __future__ import annotations

import pytest

from artfleet_cli.policy_check import check_model_name


@pytest.mark.parametrize(
    ("model", "instead"),
    [
        # relative, copied from the trainer's machine: not on this disk
        ("fleet/art/p/models/agent-1a2b/checkpoints/0003", "--model agent-1a2b@3"),
        (".artfleet/art/p/models/agent-1a2b/checkpoints/0012", "--model agent-1a2b@12"),
        ("/data/art/p/models/agent-1a2b/", "--model agent-1a2b if it is a trained model"),
    ],
)
def test_a_checkpoint_path_is_not_a_model_name(
    model: str, instead: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        check_model_name(model)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "not a path" in err and instead in err


@pytest.mark.parametrize(
    "model", ["Qwen/Qwen2.5-7B-Instruct", "my-hub/tiny", "agent-1a2b@3", "smollm2-135m-instruct"]
)
def test_a_hub_id_or_a_served_name_passes(model: str) -> None:
    check_model_name(model)  # no exit: the endpoint judges whether it serves it
