"""Prometheus metrics of the sandbox service (registered once, in the default registry)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# Commands range from `ls` (milliseconds: the overhead bench reads their p50 from these
# buckets) to whole test suites (minutes).
_COMMAND_BUCKETS = (
    0.001,
    0.0015,
    0.002,
    0.003,
    0.004,
    0.005,
    0.0075,
    0.01,
    0.015,
    0.02,
    0.03,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    120,
    300,
    600,
)
_CREATE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30)

ACTIVE_SESSIONS = Gauge("artfleet_sandbox_active_sessions", "Sandbox sessions open in this replica")
SESSIONS_CREATED = Counter("artfleet_sandbox_sessions_created", "Sandbox sessions created")
REAPED_SESSIONS = Counter(
    "artfleet_sandbox_reaped_sessions",
    "Sandbox sessions or containers removed by the reaper, by reason "
    "(idle, lifetime, orphan: owner replica gone, stale: ours but not tracked, "
    "lease: the client that owned it stopped renewing its lease)",
    ["reason"],
)
CREATE_SECONDS = Histogram(
    "artfleet_sandbox_create_seconds",
    "CreateSession latency, by where the container came from (pool, cold, process)",
    ["source"],
    buckets=_CREATE_BUCKETS,
)
POOL_SIZE = Gauge("artfleet_sandbox_pool_size", "Warm containers waiting in the pool", ["image"])
POOL_HITS = Counter("artfleet_sandbox_pool_hits", "Sessions served from the warm pool", ["image"])
POOL_MISSES = Counter(
    "artfleet_sandbox_pool_misses", "Sessions that had to wait for a cold container", ["image"]
)
EXEC_SECONDS = Histogram(
    "artfleet_sandbox_exec_seconds",
    "Wall time of Exec commands, by mode (repl, stateless)",
    ["mode"],
    buckets=_COMMAND_BUCKETS,
)
REPL_RESTARTS = Counter(
    "artfleet_sandbox_repl_restarts",
    "Session shells lost and started again (timeout, exit, exec, kill, OOM), by backend",
    ["backend"],
)
REPL_COMMANDS_PER_SESSION = Histogram(
    "artfleet_sandbox_repl_commands_per_session",
    "REPL commands a session ran, observed when it closes",
    buckets=(0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
)
EXEC_TIMEOUTS = Counter("artfleet_sandbox_exec_timeouts", "Exec commands killed by their timeout")
OOM_KILLS = Counter(
    "artfleet_sandbox_oom_kills", "Commands a process of which the OOM killer ended"
)
RUN_TESTS_SECONDS = Histogram(
    "artfleet_sandbox_run_tests_seconds", "Wall time of RunTests calls", buckets=_COMMAND_BUCKETS
)

MCP_STDIO_STREAMS = Counter(
    "artfleet_sandbox_mcp_stdio_streams",
    "McpStdio streams by how they ended "
    "(exited, crashed, idle_timeout, startup_timeout, refused, client_gone)",
    ["outcome"],
)
