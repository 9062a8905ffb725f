"""The learning bench's pure part (bench/learning_bench.py): seeds, the per-seed gains'
aggregate, the exact Mann-Whitney U test between two commits' gains, and the committed
baseline (bench/baselines/learning.json) with its lower bound and check. No fleet, no
subprocess: tests/unit/harness/test_learning_stats.py runs it in CI.

The lower bound's rule (docs/learning.md, "The learning bench and its baseline"): with
the baseline's n per-seed gains (mean m, sample standard deviation s) and a new run of
`CHECK_SEEDS` seeds, the bound is m - Z * s * sqrt(1/n + 1/CHECK_SEEDS): two standard
errors of the difference of two means below the baseline's, so an unchanged commit falls
under it about 2% of the time (normal approximation) and a drop of a few points does not
fail a 3-seed run on its noise alone.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

Z = 2.0
CHECK_SEEDS = 3  # the seeds of a default run: the run the stored lower bound is for
DEFAULT_SEEDS = 3
# Past this many rank arrangements the exact test's enumeration is refused (10 seeds a
# side are 184,756 arrangements; a bench never runs that many).
MAX_ARRANGEMENTS = 2_000_000
_GAIN_LINE = re.compile(r"^heldout_gain=([+-]?\d+(?:\.\d+)?)\s*$", re.MULTILINE)


class UsageError(ValueError):
    """Bad bench input: the message names the option (the bench exits 2 with it)."""


def parse_seeds(text: str) -> list[int]:
    """`--seeds 7,1,2` -> [7, 1, 2]: distinct non-negative integers, in the given order."""
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() for p in parts):
        raise UsageError(f"--seeds: comma-separated non-negative integers, got {text!r}")
    seeds = [int(p) for p in parts]
    if len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds: each seed once, got {text!r}")
    return seeds


def pick_seeds(seeds: str | None, n_seeds: int | None) -> list[int]:
    """The run's seeds: `--seeds` as given, or `--n-seeds N` -> 1..N (default 3)."""
    if seeds is not None and n_seeds is not None:
        raise UsageError("--seeds and --n-seeds: give one of them")
    if seeds is not None:
        return parse_seeds(seeds)
    n = DEFAULT_SEEDS if n_seeds is None else n_seeds
    if n < 1:
        raise UsageError(f"--n-seeds: at least 1, got {n}")
    return list(range(1, n + 1))


def interleave(seeds: Sequence[int], with_baseline: bool) -> list[tuple[str, int]]:
    """The run order: main seed 1, baseline seed 1, main seed 2, ... so that the machine's
    load over the run falls on both commits alike."""
    sides = ("main", "baseline") if with_baseline else ("main",)
    return [(side, seed) for seed in seeds for side in sides]


# `artfleet demo`'s last line (every commit since the demo evaluates before and after).
_DEMO_GAIN_LINE = re.compile(
    r"^held-out success: .* -> .*: ([+-]?\d+(?:\.\d+)?) points", re.MULTILINE
)
# What `artfleet demo` fixes rather than takes as an option: a setting that differs from
# these cannot run through it.
DEMO_FIXED = {
    "environment": "math-single",
    "temperature": 0.7,
    "max_tokens": 48,
    "eval_max_tasks": 0,
    "task_prompt": "",
}


def demo_gain_from_output(text: str) -> float:
    """The gain (points) `artfleet demo` prints on its `held-out success:` line."""
    found = _DEMO_GAIN_LINE.findall(text)
    if not found:
        raise ValueError("no 'held-out success:' line in the demo's output")
    return float(found[-1])


def demo_unfit(setting: Mapping[str, object]) -> dict[str, object]:
    """The setting's values `artfleet demo` cannot take (it fixes them): {} when it fits."""
    return {k: setting[k] for k, v in DEMO_FIXED.items() if setting.get(k) != v}


def gain_from_output(text: str) -> float:
    """The `heldout_gain=` figure (points) of one single-seed run's output: its last one."""
    found = _GAIN_LINE.findall(text)
    if not found:
        raise ValueError("no heldout_gain= line in the run's output")
    return float(found[-1])


def pythonpath(root: Path) -> str:
    """A checkout's import path, as /work/wt/env.sh sets it: src, then every services/<name>."""
    services = sorted(p for p in (root / "services").iterdir() if p.is_dir())
    return ":".join(str(p) for p in [root / "src", *services])


def mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("mean of no values")
    return sum(values) / len(values)


def sample_sd(values: Sequence[float]) -> float:
    """Standard deviation with n - 1 (0.0 for a single value)."""
    if len(values) < 2:
        return 0.0
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def lower_bound(gains: Sequence[float], new_seeds: int = CHECK_SEEDS, z: float = Z) -> float:
    """The module docstring's rule: mean - z * sd * sqrt(1/n + 1/new_seeds)."""
    if len(gains) < 2:
        raise ValueError("a lower bound needs the gains of at least 2 seeds")
    spread = sample_sd(gains) * math.sqrt(1 / len(gains) + 1 / new_seeds)
    return round(mean(gains) - z * spread, 1)


@dataclass(frozen=True)
class RankTest:
    """Mann-Whitney U of sample a against sample b (u_a counts pairs with a > b, ties as a
    half), and the exact two-sided p-value of the rank-sum permutation distribution."""

    u_a: float
    u_b: float
    p: float


def mann_whitney(a: Sequence[float], b: Sequence[float]) -> RankTest:
    """The exact two-sided Mann-Whitney U test (ties take mid-ranks; the p-value counts the
    arrangements of the pooled ranks whose U lies at least as far from its mean as the
    observed one). At 3 seeds a side its smallest p is 0.1: it reports, it cannot convict."""
    if not a or not b:
        raise ValueError("the rank test needs at least one value on each side")
    if math.comb(len(a) + len(b), len(a)) > MAX_ARRANGEMENTS:
        raise ValueError("too many values for the exact test's enumeration")
    ranks = _midranks([*a, *b])
    n_a, n_b = len(a), len(b)
    offset = n_a * (n_a + 1) / 2
    u_a = sum(ranks[:n_a]) - offset
    centre = n_a * n_b / 2
    observed = abs(u_a - centre)
    count = total = 0
    for chosen in itertools.combinations(ranks, n_a):
        total += 1
        if abs(sum(chosen) - offset - centre) >= observed - 1e-9:
            count += 1
    return RankTest(u_a=u_a, u_b=n_a * n_b - u_a, p=min(1.0, count / total))


def _midranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


class Measured(BaseModel):
    """Where a record's figures come from."""

    model_config = ConfigDict(extra="forbid")
    commit: str = Field(description="the code measured (a commit, or a note on it)")
    date: str
    machine: str
    how: str = ""


class Record(BaseModel):
    """One measurement: a setting, its seeds' gains (points), their mean and the bound."""

    model_config = ConfigDict(extra="forbid")
    setting: dict[str, Any]
    gains: dict[int, float] = Field(description="held-out gain per seed, points")
    mean: float
    lower_bound: float | None = None
    measured: Measured

    @model_validator(mode="after")
    def _consistent(self) -> Record:
        if not self.gains:
            raise ValueError("gains: at least one seed")
        if abs(self.mean - mean(list(self.gains.values()))) > 0.05:
            raise ValueError("mean: not the mean of gains")
        return self

    @property
    def seeds(self) -> list[int]:
        return list(self.gains)


class BaselineFile(BaseModel):
    """bench/baselines/learning.json: `accepted` is what a run is checked against (its
    lower bound by the rule, for `CHECK_SEEDS` new seeds); `earlier` older figures, kept."""

    model_config = ConfigDict(extra="forbid")
    rule: str
    accepted: Record
    earlier: list[Record] = Field(default_factory=list)

    @model_validator(mode="after")
    def _bound_by_rule(self) -> BaselineFile:
        gains = list(self.accepted.gains.values())
        if self.accepted.lower_bound != lower_bound(gains):
            raise ValueError(f"accepted.lower_bound: the rule gives {lower_bound(gains)}")
        return self


def load_baseline(path: Path) -> BaselineFile:
    return BaselineFile.model_validate_json(path.read_text())


def setting_differences(setting: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[str]:
    """`key: run value != baseline value` for each key where the two settings differ."""
    keys = sorted(set(setting) | set(baseline))
    return [
        f"{k}: {setting.get(k)!r} != {baseline.get(k)!r}"
        for k in keys
        if setting.get(k) != baseline.get(k)
    ]


@dataclass(frozen=True)
class Verdict:
    ratio: float  # the run's mean over the baseline's (the bench's `learning_vs_baseline=`)
    passed: bool  # the run's mean at or above the baseline's lower bound
    checked: bool  # False: the settings differ, so there is nothing to check against
    differences: list[str]


def check(gain_mean: float, setting: Mapping[str, Any], baseline: Record) -> Verdict:
    differences = setting_differences(setting, baseline.setting)
    bound = baseline.lower_bound
    checked = not differences and bound is not None
    ratio = gain_mean / baseline.mean if baseline.mean else math.nan
    passed = not checked or gain_mean >= (bound if bound is not None else -math.inf)
    return Verdict(ratio=ratio, passed=passed, checked=checked, differences=differences)


def new_baseline(old: BaselineFile, record: Record) -> BaselineFile:
    """`old` with `record` accepted (its bound by the rule) and the old accepted kept first
    among the earlier ones."""
    bound = lower_bound(list(record.gains.values()))
    accepted = record.model_copy(update={"lower_bound": bound})
    return BaselineFile(rule=old.rule, accepted=accepted, earlier=[old.accepted, *old.earlier])
