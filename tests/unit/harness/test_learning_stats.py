"""The learning bench's pure part (bench/learning_stats.py): seeds, the exact Mann-Whitney U
test, the lower bound's rule, the committed baseline file and its check; and the bench's
options (bench/learning_bench.py, learning_runs.py) against that file."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType

import pytest
from pydantic import ValidationError
from repo_paths import ROOT


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


stats = _load("learning_stats")
BASELINE = ROOT / "bench" / "baselines" / "learning.json"


def test_complete_separation_of_three_against_three_is_p_one_tenth() -> None:
    # 2 of the 20 arrangements are as extreme: the smallest p at 3 seeds a side.
    test = stats.mann_whitney([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    assert (test.u_a, test.u_b) == (0.0, 9.0)
    assert test.p == pytest.approx(0.1)


def test_known_exact_value() -> None:
    # scipy.stats.mannwhitneyu's documented example (method="exact"): U=17, p=0.1111.
    test = stats.mann_whitney([19.0, 22.0, 16.0, 29.0, 24.0], [20.0, 11.0, 17.0, 12.0])
    assert test.u_a == 17.0
    assert test.p == pytest.approx(1 / 9)


def test_five_against_five_separated_is_significant() -> None:
    test = stats.mann_whitney([30.0, 31.0, 32.0, 33.0, 34.0], [10.0, 11.0, 12.0, 13.0, 14.0])
    assert test.u_a == 25.0
    assert test.p == pytest.approx(2 / 252)


def test_ties_take_midranks_and_the_test_is_symmetric() -> None:
    a, b = [26.0, 34.0, 34.0], [30.0, 34.0, 40.0]
    forward, backward = stats.mann_whitney(a, b), stats.mann_whitney(b, a)
    assert forward.u_a == 3.0  # each 34 beats 30 and ties 34 (a half)
    assert forward.u_a + forward.u_b == 9.0
    assert forward.p == backward.p == pytest.approx(_pairwise_p(a, b))


def _pairwise_p(a: list[float], b: list[float]) -> float:
    """The two-sided p by another road: every split of the pooled values, U by pairs."""
    pooled = [*a, *b]

    def u(xs: list[float], ys: list[float]) -> float:
        return sum((x > y) + 0.5 * (x == y) for x in xs for y in ys)

    centre = len(a) * len(b) / 2
    observed = abs(u(a, b) - centre)
    splits = list(itertools.combinations(range(len(pooled)), len(a)))
    extreme = 0
    for chosen in splits:
        xs = [pooled[i] for i in chosen]
        ys = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        extreme += abs(u(xs, ys) - centre) >= observed
    return extreme / len(splits)


def test_exact_p_matches_pairwise_counting_on_tied_gains() -> None:
    for a, b in [
        ([34.0, 38.0, 26.0], [28.0, 40.0, 26.0]),
        ([12.0, 12.0, 14.0, 20.0], [12.0, 16.0, 16.0]),
        ([1.0, 2.0, 3.0, 4.0], [2.5, 5.0, 6.0, 7.0]),
    ]:
        assert stats.mann_whitney(a, b).p == pytest.approx(_pairwise_p(a, b))


def test_identical_samples_give_p_one() -> None:
    assert stats.mann_whitney([20.0, 20.0], [20.0, 20.0]).p == 1.0
    assert stats.mann_whitney([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]).p == 1.0


def test_rank_test_refuses_empty_and_oversized_samples() -> None:
    with pytest.raises(ValueError, match="at least one value"):
        stats.mann_whitney([], [1.0])
    with pytest.raises(ValueError, match="too many"):
        stats.mann_whitney([float(i) for i in range(20)], [float(i) for i in range(20, 40)])


def test_lower_bound_rule() -> None:
    # mean 33.2, sd 6.10; 2 * 6.10 * sqrt(1/5 + 1/3) = 8.9 points below.
    assert stats.lower_bound([34.0, 38.0, 26.0, 28.0, 40.0]) == 24.3
    assert stats.lower_bound([30.0, 30.0, 30.0]) == 30.0
    with pytest.raises(ValueError, match="at least 2"):
        stats.lower_bound([30.0])


def test_seeds_options() -> None:
    assert stats.pick_seeds(None, None) == [1, 2, 3]
    assert stats.pick_seeds(None, 5) == [1, 2, 3, 4, 5]
    assert stats.pick_seeds("7,1,2", None) == [7, 1, 2]
    for seeds, n, message in [
        ("7,1", 2, "give one of them"),
        ("7,x", None, "comma-separated"),
        ("-1", None, "comma-separated"),
        ("3,3", None, "each seed once"),
        (None, 0, "at least 1"),
    ]:
        with pytest.raises(stats.UsageError, match=message):
            stats.pick_seeds(seeds, n)


def test_runs_alternate_seed_by_seed() -> None:
    assert stats.interleave([7, 1], True) == [
        ("main", 7),
        ("baseline", 7),
        ("main", 1),
        ("baseline", 1),
    ]
    assert stats.interleave([7, 1], False) == [("main", 7), ("main", 1)]


def test_gain_is_the_last_heldout_gain_line() -> None:
    text = "heldout_gain_d1=+55.0\nheldout_gain=+3.0\nheldout_gain=-12.5\nheldout_gain_ci95=+1,+2\n"
    assert stats.gain_from_output(text) == -12.5
    with pytest.raises(ValueError, match="no heldout_gain"):
        stats.gain_from_output("heldout_gain_d1=+55.0\nheldout_gain_ci95=+1.0,+2.0\n")


def test_pythonpath_is_src_then_every_service(tmp_path: Path) -> None:
    for name in ("trainer", "api"):
        (tmp_path / "services" / name).mkdir(parents=True)
    (tmp_path / "services" / "README.md").write_text("")
    assert stats.pythonpath(tmp_path) == ":".join(
        str(p) for p in (tmp_path / "src", tmp_path / "services/api", tmp_path / "services/trainer")
    )


def _record(gains: dict[int, float], bound: float | None = None, **setting: object) -> object:
    return stats.Record(
        setting={"steps": 4, **setting},
        gains=gains,
        mean=sum(gains.values()) / len(gains),
        lower_bound=bound,
        measured=stats.Measured(commit="abc", date="2026-12-07", machine="2 CPUs"),
    )


def test_check_against_the_lower_bound() -> None:
    baseline = _record({1: 30.0, 2: 40.0}, bound=25.0)
    above = stats.check(25.0, {"steps": 4}, baseline)
    assert (above.checked, above.passed, above.ratio) == (True, True, pytest.approx(25 / 35))
    below = stats.check(24.9, {"steps": 4}, baseline)
    assert (below.checked, below.passed) == (True, False)


def test_another_setting_is_not_checked() -> None:
    verdict = stats.check(1.0, {"steps": 1}, _record({1: 30.0, 2: 40.0}, bound=25.0))
    assert (verdict.checked, verdict.passed) == (False, True)
    assert verdict.differences == ["steps: 1 != 4"]


def test_record_mean_must_be_the_gains_mean() -> None:
    with pytest.raises(ValidationError, match="mean"):
        stats.Record(
            setting={},
            gains={1: 30.0, 2: 40.0},
            mean=30.0,
            measured={"commit": "abc", "date": "d", "machine": "m"},
        )


def test_a_new_measurement_replaces_the_accepted_one() -> None:
    old = stats.load_baseline(BASELINE)
    new = stats.new_baseline(old, _record({1: 20.0, 2: 24.0, 3: 22.0}))
    assert new.accepted.gains == {1: 20.0, 2: 24.0, 3: 22.0}
    assert new.accepted.lower_bound == stats.lower_bound([20.0, 24.0, 22.0])
    assert new.earlier[0] == old.accepted
    assert new.earlier[1:] == old.earlier
    # What the bench writes reads back whole, and a hand-edited bound does not.
    assert stats.BaselineFile.model_validate_json(new.model_dump_json()) == new
    edited = new.model_dump()
    edited["accepted"]["lower_bound"] = 10.0
    with pytest.raises(ValidationError, match="the rule gives"):
        stats.BaselineFile.model_validate(edited)


def test_committed_baseline_is_the_bench_default_setting() -> None:
    baseline = stats.load_baseline(BASELINE)
    assert baseline.accepted.lower_bound == stats.lower_bound(
        list(baseline.accepted.gains.values())
    )
    bench = _load("learning_bench")
    runs = sys.modules["learning_runs"]
    args = bench.parser().parse_args([])
    assert runs.setting(args) == baseline.accepted.setting
    # A seed's run takes back the options it is given: the setting and the seed.
    again = bench.parser().parse_args(runs.child_args(args, 7))
    assert runs.setting(again) == runs.setting(args)
    assert again.seed == 7


def test_the_demo_runner_reads_the_demos_own_gain_line() -> None:
    out = (
        "demo wall time: 251s\n"
        "held-out success: 14.0% before (step 0) -> 48.0% after (step 4): +34.0 points "
        "(95% CI +22.0 .. +46.0, paired bootstrap over 50 tasks)\n"
    )
    assert stats.demo_gain_from_output(out) == 34.0
    with pytest.raises(ValueError, match="held-out success"):
        stats.demo_gain_from_output("error: the job failed\n")


def test_the_demo_runner_refuses_a_setting_the_demo_fixes_otherwise() -> None:
    demo_setting = {**stats.DEMO_FIXED, "steps": 4, "lr": 5e-4}
    assert stats.demo_unfit(demo_setting) == {}
    assert stats.demo_unfit({**demo_setting, "max_tokens": 96}) == {"max_tokens": 96}


def test_the_demo_runner_gives_the_demo_every_option_of_the_setting() -> None:
    bench = _load("learning_bench")
    runs = sys.modules["learning_runs"]
    args = bench.parser().parse_args([])
    assert stats.demo_unfit(runs.setting(args)) == {}  # the bench's default is the demo's
    options = runs.demo_args(args, 3, Path("/tmp/w"))
    given = dict(zip(options[::2], options[1::2], strict=True))
    assert given["--seed"] == "3" and given["--engine"] == args.engine
    assert given["--learning-rate"] == str(args.lr) and given["--steps"] == str(args.steps)
