"""`artfleet demo`'s job, settings and before/after line (no fleet: the job spec, the
settings it would start with, and the figures)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from artfleet.specs.job import spec_from_proto, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet_cli.demo import _gain_line, demo_fleet, demo_spec
from artfleet_cli.render import bar_chart, reward_chart


def test_demo_job_evaluates_the_test_split_before_and_after_training() -> None:
    spec = demo_spec(
        steps=3, groups=8, rollouts=8, eval_k=1, seed=7, learning_rate=5e-4, eval_temperature=0
    )
    assert (spec.environment, spec.max_turns, spec.eval_split) == ("math-single", 1, "test")
    assert spec.eval_every_steps == spec.steps == 3  # evals at step 0 and step 3 only
    assert [s.name for s in spec.reward] == ["answer_check"]
    # Greedy held-out samples while training samples at the job's temperature; the 0
    # survives the trip to the trainer (unset would mean "the job's temperature").
    sent = spec_from_proto(spec_to_proto(spec))
    assert (sent.eval_temperature, sent.temperature) == (0.0, spec.temperature)
    assert spec.temperature > 0 and spec.learning_rate == 5e-4


def test_eval_temperature_unset_stays_unset() -> None:
    spec = spec_from_proto(pb.JobSpec(eval_every_steps=1))
    assert spec.eval_temperature is None
    assert not spec_to_proto(spec).HasField("eval_temperature")


def test_bar_chart_draws_one_bar_per_value_in_eighth_blocks() -> None:
    lines = bar_chart([0.0, 0.25, 0.5, 1.0], height=2)
    # Two rows of 2-wide bars a space apart; 1.0 fills both rows, 0.5 one, 0.25 half of one.
    assert lines == ["+1.00 ┤         ██", "+0.00 ┤   ▄▄ ██ ██"]


def test_bar_chart_starts_bars_at_the_lowest_negative_value() -> None:
    assert bar_chart([-1.0, 1.0], height=2) == ["+1.00 ┤   ██", "-1.00 ┤   ██"]


def test_bar_chart_averages_runs_past_its_width_and_draws_nothing_for_no_values() -> None:
    assert bar_chart([]) == []
    lines = bar_chart([0.0, 0.0, 1.0, 1.0], height=1, width=2)
    assert lines == ["+1.00 ┤   ██"]  # two columns: mean(0, 0) and mean(1, 1)
    # 48 values in 24 columns (pairs averaged), 1 wide past 12 columns.
    assert bar_chart([1.0] * 24 + [0.0] * 24, height=1) == ["+1.00 ┤" + "█" * 12]


def test_reward_chart_titles_the_first_and_last_step() -> None:
    steps = [pb.StepSummary(step=i + 1, reward_mean=r) for i, r in enumerate([0.1, 0.3, 0.5])]
    lines = reward_chart(steps)
    assert lines[0] == "training reward per step (1-3): 0.10 -> 0.50"
    assert len(lines) == 5 and lines[1].startswith("+0.50 ┤")
    assert reward_chart([]) == []


def test_gain_line_pairs_the_first_and_last_eval_by_task() -> None:
    def summary(step: int, successes: list[int]) -> pb.EvalSummary:
        results = [
            pb.EvalTaskResult(scenario_id=f"t{i}", samples=2, successes=c, rewards=[0.0, 0.0])
            for i, c in enumerate(successes)
        ]
        rate = sum(successes) / (2 * len(successes))
        return pb.EvalSummary(step=step, k=2, success_rate=rate, results=results)

    job = pb.Job(evals=[summary(0, [0, 1, 0, 0]), summary(3, [2, 1, 1, 0])])
    line = _gain_line(job)
    assert line.startswith("held-out success: 12.5% before (step 0) -> 50.0% after (step 3)")
    assert "+37.5 points" in line and "over 4 tasks" in line


def test_engine_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    from artfleet_cli import fleet_up

    monkeypatch.setattr(fleet_up, "vllm_python", lambda: "")
    assert fleet_up.pick_engine("auto") == "torch"  # says why, on the console
    assert fleet_up.pick_engine("torch") == "torch"
    for bad in ("vllm", "tgi"):  # asked for what is not here / not an engine: exit 2
        with pytest.raises(SystemExit) as caught:
            fleet_up.pick_engine(bad)
        assert caught.value.code == 2
    monkeypatch.setattr(fleet_up, "vllm_python", lambda: "/opt/vllm/bin/python")
    assert fleet_up.pick_engine("auto") == "vllm"
    assert fleet_up.pick_engine("vllm") == "vllm"


def test_demo_takes_the_fleets_settings_as_fleet_up_does_and_names_what_it_drops(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env_file = tmp_path / "demo.env"
    env_file.write_text("ARTFLEET_JUDGE_CONCURRENCY=2\nOPENAI_API_KEY='sk-test'\n")
    environ = {
        "ARTFLEET_INFERENCE_MERGE_PATH": "disk",  # a service reads it: passed on
        "ARTFLEET_NOT_A_SETTING": "1",  # no service reads it
        "ARTFLEET_TRAINER_TARGET": "127.0.0.1:1",  # a sourced fleet.env: the fleet's own
        "HOME": "/home/x",
    }
    sets = ["ARTFLEET_JUDGE_CONCURRENCY=3"]
    fleet = demo_fleet(tmp_path, "torch", env_file, sets, environ)
    assert fleet.settings["ARTFLEET_INFERENCE_MERGE_PATH"] == "disk"
    reward = fleet.service_env("reward")
    assert reward["ARTFLEET_JUDGE_CONCURRENCY"] == "3"  # --set over --env-file
    assert reward["OPENAI_API_KEY"] == "sk-test"
    assert "ARTFLEET_TRAINER_TARGET" not in fleet.settings
    err = capsys.readouterr().err
    assert err.startswith("warning: artfleet demo does not use")
    assert "ARTFLEET_NOT_A_SETTING (no service reads it)" in err
    assert "ARTFLEET_TRAINER_TARGET (the demo's fleet sets it itself)" in err
    assert "MERGE_PATH" not in err and "JUDGE" not in err
    demo_fleet(tmp_path, "torch", None, [], {"ARTFLEET_INFERENCE_MERGE_PATH": "disk"})
    assert capsys.readouterr().err == ""  # nothing dropped, nothing said


def test_demo_refuses_bad_settings_with_exit_2_before_starting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from artfleet_cli.main import app

    # The demo reads this shell's ARTFLEET_* (CI exports ARTFLEET_ARTIFACTS_DIR): only the
    # test's own may be there, or the warning names others too.
    for key in [k for k in os.environ if k.startswith("ARTFLEET_")]:
        monkeypatch.delenv(key)
    demo = ["demo", "--workdir", str(tmp_path / "w"), "--engine", "torch"]
    cases = [
        (["--set", "ARTFLEET_NOPE=1"], "no service reads ARTFLEET_NOPE"),
        (["--set", "oops"], "--set 'oops': expected KEY=VALUE"),
        (["--env-file", str(tmp_path / "missing.env")], "missing.env"),
        (["--set", "ARTFLEET_JUDGE_CONCURRENCY=0"], "ARTFLEET_JUDGE_CONCURRENCY: "),
    ]
    for args, message in cases:
        result = CliRunner().invoke(app, [*demo, *args], env={"ARTFLEET_UNUSED_HERE": "1"})
        assert result.exit_code == 2, (args, result.output)
        assert message in result.stderr, result.output
    # A bad value is found once the settings are merged: the dropped variable named first.
    assert "ARTFLEET_UNUSED_HERE (no service reads it)" in result.stderr
    assert not (tmp_path / "w").exists()  # nothing started
