#!/usr/bin/env python3
"""Writes grafana/dashboards/*.json, the dashboards Grafana provisions at start.

    python3 scripts/gen_dashboards.py           # regenerate
    python3 scripts/gen_dashboards.py --check   # exit 1 when the committed files differ

One source for five dashboards keeps ids, grid positions and the datasource consistent.
Windows are 5m and Prometheus scrapes every 5 s, so a short job (the e2e run) fills every
panel. A panel whose description starts with GPU_ONLY shows data only on a GPU trainer;
the e2e check skips those and says so.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

DATASOURCE = {"type": "prometheus", "uid": "artfleet-prometheus"}
GPU_ONLY = "[gpu-only]"


def needs(kind: str, article: str = "a") -> str:
    """Description prefix of a panel whose series exist only once a job of `kind` ran: the
    e2e check runs its queries but does not ask them for data (tests/e2e/check_stack.py)."""
    return f"[needs {article} {kind} job]"


OUT = Path(__file__).resolve().parent.parent / "grafana" / "dashboards"
W = "[5m]"


def q(expr: str, legend: str = "") -> dict[str, str]:
    return {"expr": expr, "legend": legend}


def quantiles(metric: str, by: str = "") -> list[dict[str, str]]:
    """p50 and p95 of a histogram, optionally per label."""
    keys = f"le, {by}" if by else "le"
    suffix = f" {{{{{by}}}}}" if by else ""
    return [
        q(f"histogram_quantile({p}, sum by ({keys}) (rate({metric}_bucket{W})))", f"p{n}{suffix}")
        for p, n in ((0.5, 50), (0.95, 95))
    ]


def panel(title: str, queries: list[dict[str, str]], unit: str = "short", **kw: Any) -> dict:
    return {"title": title, "queries": queries, "unit": unit, **kw}


OVERVIEW = [
    panel("Jobs running", [q("sum(artfleet_trainer_jobs_running)", "running")], kind="stat"),
    panel(
        "Jobs finished",
        [q("sum by (outcome) (artfleet_trainer_jobs_finished_total)", "{{outcome}}")],
        kind="stat",
    ),
    panel("Current step", [q("max(artfleet_trainer_step)", "step")], kind="stat"),
    panel("Jobs submitted", [q("sum(artfleet_trainer_jobs_submitted_total)", "jobs")], kind="stat"),
    panel("Mean reward per step", [q("avg(artfleet_trainer_step_reward_mean)", "reward")]),
    panel(
        "Step time (mean)",
        [
            q(
                f"sum(rate(artfleet_trainer_step_seconds_sum{W})) / "
                f"sum(rate(artfleet_trainer_step_seconds_count{W}))",
                "step",
            ),
            q(
                f"sum(rate(artfleet_trainer_train_seconds_sum{W})) / "
                f"sum(rate(artfleet_trainer_train_seconds_count{W}))",
                "training",
            ),
        ],
        unit="s",
    ),
    panel(
        "Rollouts/s",
        [q(f"sum(rate(artfleet_rollout_episodes_total{W}))", "episodes/s")],
        unit="ops",
    ),
    panel(
        "Trajectories trained/s",
        [q(f"sum(rate(artfleet_trainer_trajectories_total{W}))", "trajectories/s")],
        unit="ops",
    ),
    # Evaluation: ids in 150-179, so panels added elsewhere never collide.
    panel(
        "Held-out eval: pass@k and success rate (last eval)",
        [
            q('max by (experiment, split) (artfleet_trainer_eval{metric="pass_at_k"})',
              "pass@k {{experiment}}/{{split}}"),
            q('max by (experiment, split) (artfleet_trainer_eval{metric="success_rate"})',
              "success {{experiment}}/{{split}}"),
        ],
        unit="percentunit",
        id=150,
        description="Set after each in-training evaluation (eval_every_steps).",
    ),
    panel(
        "Held-out eval: mean reward (last eval)",
        [q('max by (experiment, split) (artfleet_trainer_eval{metric="reward_mean"})',
           "{{experiment}}/{{split}}")],
        id=151,
    ),
    panel(
        "Health findings (1 = over / near a limit)",
        [q("max by (service, check, severity) (artfleet_health_findings)",
           "{{service}} {{check}} {{severity}}")],
        id=152,
        description="artfleet.runtime.health: child processes, free space, work dir size, stale"
        " dirs.",
    ),
    # The HTTP API (services/api): ids 180-199.
    panel(
        "API requests/s by route and status",
        [
            q(
                f"sum by (route, status) (rate(artfleet_api_requests_total{W}))",
                "{{route}} {{status}}",
            )
        ],
        unit="reqps",
        id=180,
    ),
    panel(
        "API latency",
        quantiles("artfleet_api_request_seconds"),
        unit="s",
        id=181,
        description="Streams (/stream) count until they end: their time is the job's.",
    ),
    # The health monitor of every service (artfleet.runtime.health): ids 300-309.
    panel(
        "Health: free space",
        [q("min by (service, path) (artfleet_health_free_bytes)", "{{service}} {{path}}")],
        unit="bytes",
        id=300,
        description="/tmp and each work dir; under ARTFLEET_HEALTH_MIN_FREE_BYTES is critical.",
    ),
    panel(
        "Health: child processes",
        [q("max by (service) (artfleet_health_child_processes)", "{{service}}")],
        id=301,
        description="Descendants of each service process (sessions, MCP servers).",
    ),
    panel(
        "Health: work dir size",
        [q("max by (service, path) (artfleet_health_dir_bytes)", "{{service}} {{path}}")],
        unit="bytes",
        id=302,
    ),
    panel(
        "Health: stale session / rollout dirs",
        # A flat 0 per service where no session-like dir is watched (Docker sandboxes).
        [q("max by (service, path) (artfleet_health_stale_dirs) or "
           "max by (service) (artfleet_health_child_processes) * 0", "{{service}} {{path}}")],
        id=303,
        description="Entries untouched for ARTFLEET_HEALTH_STALE_AFTER_S (an hour).",
    ),
]  # fmt: skip

ROLLOUT = [
    panel(
        "Episodes/s by finish",
        [q(f"sum by (finish) (rate(artfleet_rollout_episodes_total{W}))", "{{finish}}")],
        unit="ops",
    ),
    panel(
        "Episodes per worker",
        [q(f"sum by (instance) (increase(artfleet_rollout_episodes_total{W}))", "{{instance}}")],
    ),
    panel("Turns per episode", quantiles("artfleet_rollout_turns")),
    panel("Model latency", quantiles("artfleet_rollout_model_seconds"), unit="s"),
    panel("Sandbox exec latency (worker)", quantiles("artfleet_rollout_sandbox_exec_seconds"), "s"),
    panel(
        "Failures",
        # `or ... * 0`: a flat 0 while episodes run and nothing failed (no series otherwise).
        [
            q(
                f"sum by (kind) (increase(artfleet_rollout_failures_total{W})) or "
                f"sum(increase(artfleet_rollout_episodes_total{W})) * 0",
                "{{kind}}",
            )
        ],
    ),
    panel(
        "Groups by outcome",
        [q(f"sum by (outcome) (increase(artfleet_rollout_groups_total{W}))", "{{outcome}}")],
    ),
    panel("Group time", quantiles("artfleet_rollout_group_seconds"), unit="s"),
    panel(
        "Rollout idle per step (waiting for training)",
        [
            q(
                f'sum(rate(artfleet_trainer_idle_seconds_sum{{side="rollout"}}{W})) / '
                f'sum(rate(artfleet_trainer_idle_seconds_count{{side="rollout"}}{W}))',
                "rollout idle",
            ),
            q(
                f'sum(rate(artfleet_trainer_idle_seconds_sum{{side="trainer"}}{W})) / '
                f'sum(rate(artfleet_trainer_idle_seconds_count{{side="trainer"}}{W}))',
                "trainer idle",
            ),
        ],
        unit="s",
        description="Measured by the trainer per step: seconds training ran with no group left "
        "to roll out, and seconds the trainer waited for groups.",
        id=210,
    ),
    panel(
        "Policy staleness of trained trajectories",
        quantiles("artfleet_trainer_policy_staleness"),
        description="How many versions behind the trained model the rollouts sampled.",
        id=211,
    ),
    # Agent kinds: ids 100-119.
    panel(
        "Episodes/s by agent kind",
        [q(f"sum by (agent) (rate(artfleet_rollout_agent_episodes_total{W}))", "{{agent}}")],
        unit="ops",
        id=100,
    ),
    panel(
        "Tool calls by tool",
        [
            q(
                f"sum by (agent, tool) (increase(artfleet_rollout_tool_calls_total{W}))",
                "{{agent}} {{tool}}",
            )
        ],
        id=101,
        description=f"{needs('tool-calling')} Calls the model made per tool; (unknown) = a "
        "name no tool has.",
    ),
    panel(
        "Malformed tool calls (share)",
        [
            q(
                f'sum by (agent) (increase(artfleet_rollout_tool_calls_total{{ok="false"}}{W})) '
                f"/ sum by (agent) (increase(artfleet_rollout_tool_calls_total{W}))",
                "{{agent}}",
            )
        ],
        unit="percentunit",
        id=102,
        description=f"{needs('tool-calling')} Unknown tools, bad arguments, over-long results: "
        "invalid steps.",
    ),
    panel(
        "MCP request latency",
        quantiles("artfleet_rollout_mcp_call_seconds", "op"),
        "s",
        id=103,
        description=f"{needs('MCP', 'an')} Each MCP request of an episode's session, by operation.",
    ),
    # Repo tasks (ids 130-149).
    panel(
        "Repo tasks resolved",
        [
            q(
                f'sum(rate(artfleet_rollout_repo_tasks_total{{resolved="true"}}{W})) / '
                f"sum(rate(artfleet_rollout_repo_tasks_total{W}))",
                "resolved",
            )
        ],
        unit="percentunit",
        id=130,
        description=f"{needs('repo-task')} Repo-task episodes whose hidden F2P and P2P tests "
        "all passed",
    ),
    panel(
        "Hidden tests by group",
        [
            q(
                f"sum by (group, outcome) (rate(artfleet_rollout_repo_tests_total{W}))",
                "{{group}} {{outcome}}",
            )
        ],
        unit="ops",
        id=131,
        description=f"{needs('repo-task')} Hidden F2P / P2P tests by outcome.",
    ),
    panel(
        "Hidden-test time per episode",
        quantiles("artfleet_rollout_repo_test_seconds"),
        unit="s",
        id=132,
        description=f"{needs('repo-task')} Putting the hidden tests in place and running them.",
    ),
]

_HITS = f"sum(rate(artfleet_sandbox_pool_hits_total{W}))"
_MISSES = f"(sum(rate(artfleet_sandbox_pool_misses_total{W})) or vector(0))"
SANDBOX = [
    panel(
        "Sessions created per replica",
        [
            q(
                f"sum by (instance) (increase(artfleet_sandbox_sessions_created_total{W}))",
                "{{instance}}",
            )
        ],
    ),
    panel(
        "Open sessions per replica",
        [q("sum by (instance) (artfleet_sandbox_active_sessions)", "{{instance}}")],
    ),
    panel(
        "Pool hit rate",
        [q(f"{_HITS} / ({_HITS} + {_MISSES})", "hit rate")],
        unit="percentunit",
    ),
    panel(
        "Warm pool size per replica",
        [q("sum by (instance) (artfleet_sandbox_pool_size)", "{{instance}}")],
    ),
    panel("Exec latency", quantiles("artfleet_sandbox_exec_seconds"), unit="s"),
    panel("CreateSession latency", quantiles("artfleet_sandbox_create_seconds", "source"), "s"),
    panel(
        "Exec timeouts",
        [q(f"sum(increase(artfleet_sandbox_exec_timeouts_total{W}))", "timeouts")],
    ),
    panel("OOM kills", [q(f"sum(increase(artfleet_sandbox_oom_kills_total{W}))", "OOM kills")]),
]

REWARD = [
    # Quantiles, not sum/count: the score buckets go below 0, and prometheus_client then
    # exports no `_sum` for the histogram.
    panel("Score per scorer", quantiles("artfleet_reward_score", "scorer")),
    panel(
        "Scores/s per scorer",
        [q(f"sum by (scorer) (rate(artfleet_reward_score_count{W}))", "{{scorer}}")],
        unit="ops",
    ),
    panel("Judge latency", quantiles("artfleet_reward_judge_seconds", "scorer"), unit="s"),
    panel(
        "Judge errors",
        # Failures by scorer and type, or a flat 0 for judge scorers that ran without any.
        [
            q(
                f"sum by (scorer, type) (increase(artfleet_reward_failures_total{W})) or "
                f"sum by (scorer) (increase(artfleet_reward_judge_seconds_count{W})) * 0",
                "{{scorer}} {{type}}",
            )
        ],
    ),
    panel(
        "Groups scored/s",
        [q(f"sum(rate(artfleet_reward_requests_total{W}))", "groups/s")],
        unit="ops",
    ),
    panel("Scoring time per group", quantiles("artfleet_reward_scoring_seconds"), unit="s"),
]

TRAINER = [
    panel("Loss", [q("artfleet_trainer_step_loss", "loss")]),
    panel("Learning rate", [q("artfleet_trainer_learning_rate", "lr")]),
    panel(
        "Tokens/s",
        [
            q(f"sum(rate(artfleet_trainer_trained_tokens_total{W}))", "trained"),
            q(
                f"sum(rate(artfleet_inference_generated_tokens_total{W})) or "
                f"sum(rate(artfleet_trainer_generated_tokens_total{W}))",
                "generated",
            ),
        ],
    ),
    panel(
        "Inference requests/s",
        [
            q(
                f"sum by (status) (rate(artfleet_inference_requests_total{W})) or "
                f"sum by (status) (rate(artfleet_trainer_generation_requests_total{W})) or "
                f"sum by (status) (rate(artfleet_trainer_proxy_requests_total{W}))",
                "{{status}}",
            )
        ],
        unit="ops",
    ),
    panel("Mean reward per step", [q("artfleet_trainer_step_reward_mean", "reward")]),
    panel("Training time per step", quantiles("artfleet_trainer_train_seconds"), unit="s"),
    panel(
        "Policy publish time",
        quantiles("artfleet_inference_publish_seconds"),
        unit="s",
        description="Checkpoint saved → served by vLLM (merged reload or LoRA load).",
    ),
    panel(
        "Inference replicas",
        [
            q('sum(artfleet_trainer_inference_replicas{state="serving"})', "serving"),
            q('sum(artfleet_trainer_inference_replicas{state="quarantined"})', "quarantined"),
            q(
                # no series before the first quarantine: none is 0
                f"(sum(increase(artfleet_trainer_inference_replica_quarantines_total{W}))"
                " or vector(0))",
                "quarantines",
            ),
        ],
        description="Replicas behind ARTFLEET_INFERENCE_URL; a failed publish or check "
        "quarantines one until it serves the current policy again.",
    ),
    panel(
        "Groups requeued",
        [q(f"sum(increase(artfleet_trainer_groups_requeued_total{W}))", "requeued")],
        description="Groups whose rollout worker died mid-group (lease expired), sent again.",
    ),
    panel(
        "Prefix cache hit rate",
        [
            q(
                f'sum(rate(artfleet_trainer_prefix_cache_requests_total{{result="hit"}}{W})) / '
                f"sum(rate(artfleet_trainer_prefix_cache_requests_total{W}))",
                "prompts with a cached prefix",
            ),
            q(
                f'sum(rate(artfleet_trainer_prefix_cache_prompt_tokens_total{{kind="cached"}}{W}))'
                f" / sum(rate(artfleet_trainer_prefix_cache_prompt_tokens_total{W}))",
                "prompt tokens not prefilled",
            ),
        ],
        unit="percentunit",
        description=f"{needs('torch-engine')} Prompts that reused earlier turns' key/values in "
        "the trainer's own server (vLLM's prefix cache is vLLM's).",
    ),
    panel(
        "Prefix cache memory",
        [q("sum(artfleet_trainer_prefix_cache_bytes)", "key/values held")],
        unit="bytes",
        description=f"{needs('torch-engine')} Key/values the trainer's own server keeps for "
        "reuse, within ARTFLEET_PREFIX_CACHE_BYTES (least recently used evicted first).",
    ),
    panel(
        "GPU memory",
        [q("sum by (device, kind) (artfleet_trainer_gpu_memory_bytes)", "gpu{{device}} {{kind}}")],
        unit="bytes",
        description=f"{GPU_ONLY} Device-wide GPU memory, sampled after each step (CUDA only).",
    ),
    panel(
        "Policy staleness of trained trajectories",
        [
            *quantiles("artfleet_trainer_policy_staleness"),
            q(
                f"sum(rate(artfleet_trainer_policy_staleness_sum{W})) / "
                f"sum(rate(artfleet_trainer_policy_staleness_count{W}))",
                "mean",
            ),
        ],
        description="Versions between the policy that sampled a trajectory and the model trained "
        "on it (0 = on-policy; at most the job's max_steps_off_policy).",
        id=200,
    ),
    panel(
        "Idle seconds per step",
        [
            q(
                f"sum by (side) (rate(artfleet_trainer_idle_seconds_sum{W})) / "
                f"sum by (side) (rate(artfleet_trainer_idle_seconds_count{W}))",
                "{{side}}",
            )
        ],
        unit="s",
        description="trainer: waiting for rollouts; rollout: training with no group left to roll "
        "out. Asynchronous steps (max_steps_off_policy > 0) overlap the two.",
        id=201,
    ),
    panel(
        "Stale groups run again",
        [q(f"sum(increase(artfleet_trainer_stale_groups_total{W}))", "re-run")],
        description="Groups sampled more than max_steps_off_policy versions behind: not trained "
        "on, run again with the current policy.",
        id=202,
    ),
    panel(
        "Sampler/trainer mismatch: KL and |Δ logprob|",
        [
            q('max by (engine) (artfleet_trainer_mismatch{figure="k3"})', "k3 {{engine}}"),
            q(
                'max by (engine) (artfleet_trainer_mismatch{figure="abs_delta_mean"})',
                "mean |Δ| {{engine}}",
            ),
            q(
                'max by (engine) (artfleet_trainer_mismatch{figure="abs_delta_p99"})',
                "p99 |Δ| {{engine}}",
            ),
        ],
        description=f"{needs('trained')} Last step, over its trained tokens with a sampler "
        "logprob: k3 = KL(sampler || trainer) per token, and |trainer - sampler logprob|, by the "
        "engine that sampled (torch backend; series appear once a step trained such tokens). "
        "Read with the policy staleness panel: an off-policy step's lag adds to it.",
        id=203,
    ),
    panel(
        "Sampler/trainer mismatch: importance ratio",
        [
            *[
                q(
                    f'max by (engine) (artfleet_trainer_mismatch{{figure="ratio_{p}"}})',
                    f"{p} {{{{engine}}}}",
                )
                for p in ("p1", "p50", "p99")
            ],
            q(
                'max by (engine) (artfleet_trainer_mismatch{figure="outside_0_5_2"})',
                "share outside [0.5, 2] {{engine}}",
            ),
            q(
                f"sum by (engine) (increase(artfleet_trainer_mismatch_warnings_total{W}))",
                "warnings {{engine}}",
            ),
        ],
        description=f"{needs('trained')} Last step's trainer/sampler probability ratio per "
        "token: quantiles, the share outside [0.5, 2] (a warning past "
        "ARTFLEET_MISMATCH_WARN_OUTSIDE_SHARE), and steps that warned.",
        id=204,
    ),
    panel(
        "SFT loss",
        [q("max(artfleet_sft_loss)", "loss (last batch)")],
        description="A job's SFT warm-start (spec `sft:`): mean cross-entropy per assistant "
        "token of each batch, before GRPO step 1.",
        id=310,
    ),
    panel(
        "SFT progress",
        [
            q("max(artfleet_sft_progress)", "share of batches"),
            q("max(artfleet_sft_epoch)", "epoch"),
        ],
        description="Batches trained out of the phase's total (0..1), and the current epoch.",
        id=311,
    ),
    panel(
        "SFT learning rate and batches",
        [
            q("max(artfleet_sft_learning_rate)", "lr"),
            q(f"sum(rate(artfleet_sft_batches_total{W}))", "batches/s"),
        ],
        id=312,
    ),
    panel(
        "SFT samples skipped",
        [q("sum by (reason) (artfleet_sft_samples_skipped_total)", "{{reason}}")],
        description=f"{needs('SFT', 'an')} Offline records left out of an SFT phase, by "
        "named reason.",
        id=313,
    ),
    panel(
        "Tinker API: loss per token",
        [q("max by (run) (artfleet_tinker_loss_per_token)", "{{run}}")],
        description=f"{needs('Tinker API')} Each Tinker API run's last forward_backward: its "
        "loss sum over the datums' tokens.",
        id=314,
    ),
    panel(
        "Tinker API: tokens and optimizer steps",
        [
            q(f"sum by (run) (rate(artfleet_tinker_tokens_total{W}))", "tokens/s {{run}}"),
            q(f"sum by (run) (rate(artfleet_tinker_optim_steps_total{W}))", "steps/s {{run}}"),
        ],
        description=f"{needs('Tinker API')} Tokens through forward_backward and optim_step "
        "calls, per run.",
        id=315,
    ),
    panel(
        "Tinker API: step time",
        quantiles("artfleet_tinker_step_seconds"),
        unit="s",
        description=f"{needs('Tinker API')} From one optim_step of a run to its next.",
        id=316,
    ),
    panel(
        "Tinker API: clients and calls",
        [
            q("max(artfleet_tinker_clients_loaded)", "clients loaded"),
            q(f"sum by (op, outcome) (rate(artfleet_tinker_calls_total{W}))", "{{op}} {{outcome}}"),
        ],
        description=f"{needs('Tinker API')} Training clients in memory; calls run per second.",
        id=317,
    ),
]

DASHBOARDS = {
    "overview": ("ArtFleet / Overview", OVERVIEW),
    "rollout": ("ArtFleet / Rollout", ROLLOUT),
    "sandbox": ("ArtFleet / Sandbox", SANDBOX),
    "reward": ("ArtFleet / Reward", REWARD),
    "trainer": ("ArtFleet / Trainer", TRAINER),
}


def render_panel(index: int, spec: dict) -> dict:
    kind = spec.get("kind", "timeseries")
    width = 6 if kind == "stat" else 12
    height = 4 if kind == "stat" else 8
    # Stats fill rows of four, time series rows of two; y is computed from the index.
    per_row = 24 // width
    pos = {"h": height, "w": width, "x": (index % per_row) * width, "y": 0}
    targets = [
        {"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": t["expr"],
         "legendFormat": t["legend"] or "__auto", "range": True}
        for i, t in enumerate(spec["queries"])
    ]  # fmt: skip
    return {
        "id": spec.get("id", index + 1),  # a fixed id keeps merged boards collision-free
        "type": kind,
        "title": spec["title"],
        "description": spec.get("description", ""),
        "datasource": DATASOURCE,
        "gridPos": pos,
        "targets": targets,
        "fieldConfig": {"defaults": {"unit": spec["unit"]}, "overrides": []},
        "options": {},
    }


def layout(panels: list[dict]) -> None:
    """Rows: consecutive panels fill 24 columns, then the next row starts below."""
    x = y = row_h = 0
    for p in panels:
        pos = p["gridPos"]
        if x + pos["w"] > 24:
            x, y, row_h = 0, y + row_h, 0
        pos["x"], pos["y"] = x, y
        x += pos["w"]
        row_h = max(row_h, pos["h"])


def render(uid: str, title: str, specs: list[dict]) -> dict:
    panels = [render_panel(i, s) for i, s in enumerate(specs)]
    layout(panels)
    return {
        "uid": f"artfleet-{uid}",
        "title": title,
        "tags": ["artfleet"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "annotations": {"list": []},
        "templating": {"list": []},
        "panels": panels,
    }


def rendered() -> dict[str, str]:
    return {
        f"{uid}.json": json.dumps(render(uid, title, specs), indent=2) + "\n"
        for uid, (title, specs) in DASHBOARDS.items()
    }


def main(argv: list[str]) -> int:
    files = rendered()
    if "--check" in argv:
        stale = [n for n, text in files.items() if not (OUT / n).is_file()
                 or (OUT / n).read_text() != text]  # fmt: skip
        for name in stale:
            print(f"grafana/dashboards/{name} is stale: run scripts/gen_dashboards.py")
        return 1 if stale else 0
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (OUT / name).write_text(text)
    print(f"wrote {len(files)} dashboards to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
