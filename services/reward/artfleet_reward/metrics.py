"""Prometheus metrics of the reward service (the shared RPC metrics live in
artfleet.runtime.metrics)."""

from __future__ import annotations

import functools

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

# Rewards are small per-step sums (about -0.5 .. 0.5) plus task/test bonuses up to ~2.
SCORE_BUCKETS = (-1.0, -0.5, -0.2, -0.1, -0.05, 0.0, 0.05, 0.1, 0.2, 0.5, 1.0, 1.5, 2.0, 3.0)
SECONDS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30, 120)
# Judge calls: a hosted model answers in about a second, a CPU judge in tens of seconds.
JUDGE_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300)
TOTAL = "total"  # the `scorer` label value of the weighted sum


class RewardMetrics:
    """One set per registry: tests pass their own registry, the service uses the default."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.score = Histogram(
            "artfleet_reward_score",
            f"Scores given per trajectory, by scorer (before weighting; {TOTAL!r} = reward)",
            ["scorer"],
            buckets=SCORE_BUCKETS,
            registry=registry,
        )
        self.requests = Counter(
            "artfleet_reward_requests_total", "ScoreGroup requests received", registry=registry
        )
        self.failures = Counter(
            "artfleet_reward_failures_total",
            "Scoring failures, by scorer and type (invalid_spec/invalid_request for requests;"
            " error, timeout, unavailable, invalid_output for scorers)",
            ["scorer", "type"],
            registry=registry,
        )
        self.dropped = Counter(
            "artfleet_reward_dropped_total",
            "What failure policies did: trajectories dropped, groups dropped, jobs failed",
            ["scorer", "action"],
            registry=registry,
        )
        self.judge_seconds = Histogram(
            "artfleet_reward_judge_seconds",
            "Latency of one judge LLM call (ruler: one per group; judge: one per trajectory)",
            ["scorer"],
            buckets=JUDGE_BUCKETS,
            registry=registry,
        )
        self.judge_tokens = Counter(
            "artfleet_reward_judge_tokens_total",
            "Tokens used by judge LLM calls, by scorer and kind (prompt, completion)",
            ["scorer", "kind"],
            registry=registry,
        )
        self.judge_cache = Counter(
            "artfleet_reward_judge_cache_total",
            "Judge verdict cache lookups, by result (hit, miss)",
            ["scorer", "result"],
            registry=registry,
        )
        self.mcp_seconds = Histogram(
            "artfleet_reward_mcp_seconds",
            "Time to evaluate one trajectory on an MCP server (connect, replay, evaluate)",
            buckets=JUDGE_BUCKETS,
            registry=registry,
        )
        self.scoring_seconds = Histogram(
            "artfleet_reward_scoring_seconds",
            "Time to score one group",
            buckets=SECONDS_BUCKETS,
            registry=registry,
        )


@functools.cache
def default_metrics() -> RewardMetrics:
    # Registering the same names twice in the default registry raises: create them once.
    return RewardMetrics(REGISTRY)
