"""Rollout metrics (Prometheus naming); the rollout dashboard reads these."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

EPISODES = Counter(
    "artfleet_rollout_episodes_total", "Episodes finished, by how they ended", ["finish"]
)
TURNS = Histogram(
    "artfleet_rollout_turns",
    "Assistant turns per episode",
    buckets=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64),
)
# Milliseconds too: what the platform adds to a turn is read from these (overhead bench).
_MS_BUCKETS = (0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03)
MODEL_SECONDS = Histogram(
    "artfleet_rollout_model_seconds",
    "Latency of one model call (chat completion)",
    buckets=(*_MS_BUCKETS, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 40, 80, 160),
)
POLICY_REQUEST_SECONDS = Histogram(
    "artfleet_rollout_policy_request_build_seconds",
    "Building one policy request's JSON body (the history's encoding included)",
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1),
)
SANDBOX_SECONDS = Histogram(
    "artfleet_rollout_sandbox_exec_seconds",
    "Latency of one sandbox Exec, seen by the worker",
    buckets=(*_MS_BUCKETS, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
FAILURES = Counter(
    "artfleet_rollout_failures_total",
    "Failures by kind (sandbox_lost: a session gone with its replica, counted once at the "
    "first call that found it gone; sandbox_unavailable: no replica took a new session; "
    "reward_unavailable, redis_unavailable: retried calls; episode: failed episodes; "
    "policy_unavailable: a group held because the policy endpoint did not answer)",
    ["kind"],
)
SANDBOX_SESSIONS = Gauge(
    "artfleet_rollout_sandbox_sessions",
    "Sandbox sessions this worker holds open, by replica address",
    ["replica"],
)
GROUPS = Counter(
    "artfleet_rollout_groups_total", "Groups run and published, by outcome", ["outcome"]
)
GROUP_SECONDS = Histogram(
    "artfleet_rollout_group_seconds",
    "Wall time of one group (episodes + scoring)",
    buckets=(1, 5, 10, 30, 60, 120, 300, 600, 1200),
)
AGENT_EPISODES = Counter(
    "artfleet_rollout_agent_episodes_total",
    "Episodes finished, by agent kind (terminal, tools, mcp, single) and how they ended",
    ["agent", "finish"],
)
TOOL_CALLS = Counter(
    "artfleet_rollout_tool_calls_total",
    "Tool calls the model made, by agent kind, tool ((unknown) for names no tool has) and "
    "whether the call was well-formed",
    ["agent", "tool", "ok"],
)
MCP_SECONDS = Histogram(
    "artfleet_rollout_mcp_call_seconds",
    "Latency of one MCP request (start, list, call, evaluate) seen by the worker",
    ["op"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
REPO_TASKS = Counter(
    "artfleet_rollout_repo_tasks_total",
    "Repo-task episodes judged by their hidden tests, by whether every F2P/P2P test passed",
    ["resolved"],
)
REPO_TESTS = Counter(
    "artfleet_rollout_repo_tests_total",
    "Hidden tests of repo tasks, by group (f2p, p2p) and outcome (passed, failed)",
    ["group", "outcome"],
)
REPO_TEST_SECONDS = Histogram(
    "artfleet_rollout_repo_test_seconds",
    "Placing and running a repo task's hidden tests, per episode",
    buckets=(0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300),
)
PLUGINS = Gauge(
    "artfleet_rollout_plugins",
    "Installed environments and agent kinds (1 each), by entry point group, name, package, "
    "version and state (loaded or broken)",
    ["group", "name", "package", "version", "state"],
)
POLICY_REQUESTS = Counter(
    "artfleet_rollout_policy_requests_total",
    "Policy calls (chat completions) sent, by inference replica (host:port)",
    ["replica"],
)
POLICY_FAILOVERS = Counter(
    "artfleet_rollout_policy_failovers_total",
    "Policy calls that left an inference replica for another (it was down, or did not "
    "serve the policy), by the replica left",
    ["replica"],
)
POLICY_IN_FLIGHT = Gauge(
    "artfleet_rollout_policy_in_flight",
    "Policy calls this worker has in flight, by inference replica",
    ["replica"],
)
_FAILURE_TYPES = 42  # user code names the types: the label's values stay bounded
EPISODE_FAILURES = Counter(
    "artfleet_rollout_episode_failures_total",
    "Failed episodes by exception type (a group that could not run counts its rollouts); "
    f"past {_FAILURE_TYPES} types, new ones count as (other)",
    ["type"],
)
_seen_types: set[str] = set()


def failure_type(name: str) -> str:
    """The `type` label for an exception type name: its own for the first types seen."""
    if name in _seen_types or len(_seen_types) < _FAILURE_TYPES:
        _seen_types.add(name)
        return name
    return "(other)"
