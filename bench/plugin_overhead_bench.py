"""A plugin's cost per turn against a bundled kind's, on the same fleet and the same turns.

    python bench/plugin_overhead_bench.py [--groups 4] [--rollouts 2] [--steps 1]

A real local fleet (bench/overhead_bench.py's: redis-server, Celery rollout worker, sandbox
with the local backend, reward, torch trainer) whose policy is the replay server
(bench/replay_policy.py), which answers at once with the same script for every episode:
`bash ls`, `bash echo ... > hello.txt`, `submit`. Two jobs run it, one episode at a time
(`max_concurrent: 1`, the cost of a turn, not of a queue):

- bundled: the `tools` kind on `tool-shell` (bash calls in a sandbox session, then submit);
- plugin: an installed package's ART rollout function doing the same turns the ART way
  (`model.openai_client()` with the same tools, each bash call run through
  `artfleet.clients.episode.sandbox()`, each choice and tool result appended by the plugin).

A turn's platform cost is the replay server's answer leaving to the same episode's next
request arriving (the sandbox exec, the agent's or plugin's bookkeeping, both HTTP legs).
The first gap of an episode costs several times the second (a fresh session's first
exec), so a p50 over both mixes two populations; the figure is the p50 of each turn's
gaps, averaged over the turns. The jobs alternate, `--rounds` times each, and each side's
median round is compared (the machine is shared).

Last lines: `bundled_overhead_ms_per_turn_p50=`, `plugin_overhead_ms_per_turn_p50=`,
`plugin_turn_overhead_ratio=` (plugin ÷ bundled, p50; target <= 1.1).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from overhead_bench import Bench, uptime
from replay_policy import ReplayPolicy, Served, gaps_by_turn, load_script, percentile

from artfleet.specs.job import JobSpecModel
from artfleet_cli.fleet import LocalFleet

PACKAGE = "artfleet_bench_plugin"
PLUGIN = '''
"""The tool agent's loop, written as an ART rollout function."""
import json

import art

from artfleet.clients.episode import sandbox
from artfleet_rollout.art_environment import ArtEnvironment

TOOLS = [
    {"type": "function", "function": {
        "name": "bash", "description": "Run a shell command in the workspace",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                       "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "submit", "description": "Finish the task",
        "parameters": {"type": "object", "properties": {}}}},
]


async def rollout(model: art.Model, task: dict) -> art.Trajectory:
    client = model.openai_client()
    trajectory = art.Trajectory(
        messages_and_choices=[
            {"role": "system", "content": "Use the tools, then submit."},
            {"role": "user", "content": task["prompt"]},
        ],
        tools=TOOLS,
        reward=0.0,
    )
    async with sandbox() as box:
        for _ in range(task["max_turns"]):
            completion = await client.chat.completions.create(
                model=model.get_inference_name(), messages=trajectory.messages(), tools=TOOLS
            )
            choice = completion.choices[0]
            trajectory.messages_and_choices.append(choice)
            calls = choice.message.tool_calls or []
            if not calls or calls[0].function.name == "submit":
                break
            for call in calls:
                command = json.loads(call.function.arguments or "{}").get("command", "")
                ran = await box.exec(command, timeout_s=30)
                trajectory.messages_and_choices.append(
                    {"role": "tool", "tool_call_id": call.id,
                     "content": (ran.stdout + ran.stderr)[-4000:]}
                )
        done = await box.exec("test -f hello.txt", timeout_s=30)
    trajectory.reward = 1.0 if done.exit_code == 0 else 0.0
    return trajectory


tool_loop = ArtEnvironment(
    rollout,
    scenarios=[{"id": f"hello-{i:02d}", "prompt": "Create hello.txt saying hello.",
                "max_turns": 8} for i in range(16)],
)
'''


def install(site: Path) -> None:
    """The plugin as `pip install` leaves a package: its module and its dist-info."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{PACKAGE}.py").write_text(PLUGIN)
    info = site / f"{PACKAGE}-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {PACKAGE.replace('_', '-')}\nVersion: 0.1\n"
    )
    (info / "entry_points.txt").write_text(
        f"[artfleet.environments]\nbench-tool-loop = {PACKAGE}:tool_loop\n"
    )


def per_turn_ms(served: list[Served]) -> float:
    """Each turn's p50 gap, averaged over the turns (ms)."""
    by_turn = gaps_by_turn(served)
    if not by_turn:
        raise RuntimeError(f"no episode made two turns; served: {served[:6]}")
    return statistics.mean(percentile(g, 50) for g in by_turn.values()) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--rollouts", type=int, default=2)
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", default="")
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="plugin-overhead-bench-"))
    install(workdir / "site")
    fleet = LocalFleet(workdir, api=False)
    script = load_script("")
    policy = ReplayPolicy(script, fleet.token)
    policy.start()
    fleet.extra_env = {
        "ARTFLEET_INFERENCE_PUBLIC_URL": policy.base_url,  # the workers call the replay server
        "PYTHONPATH": str(workdir / "site"),  # the plugin, installed for the fleet's Python
    }
    spec = dict(
        steps=args.steps,
        groups_per_step=args.groups,
        rollouts_per_group=args.rollouts,
        max_turns=len(script) + 1,
        max_tokens=64,
        learning_rate=1e-4,
        seed=7,
        max_concurrent=1,
    )
    print(f"fleet starting, uptime: {uptime()}", flush=True)
    fleet.start(timeout_s=600)
    try:
        bench = Bench.on(fleet, policy)
        runs: dict[str, list[float]] = {}
        # Interleaved, so a burst of load on the shared machine hits both.
        pairs = (("bundled", "tool-shell"), ("plugin", "bench-tool-loop")) * args.rounds
        for n, (label, environment) in enumerate(pairs):
            job = {**spec, "environment": environment, "name": f"{label}-{n}"}
            first = len(policy.served)
            bench.run_job(label, JobSpecModel.model_validate(job))
            runs.setdefault(label, []).append(per_turn_ms(policy.served[first:]))
            print(f"{label} round {n // 2 + 1}: per_turn_p50_ms={runs[label][-1]:.1f}")
    finally:
        fleet.stop()
        policy.stop()
    bundled, plugin = statistics.median(runs["bundled"]), statistics.median(runs["plugin"])
    print(f"logs in {fleet.workdir / 'logs'}; uptime: {uptime()}")
    rounds = {label: [round(v, 1) for v in values] for label, values in runs.items()}
    print(f"rounds_per_turn_p50_ms={rounds}")
    print(f"bundled_overhead_ms_per_turn_p50={bundled:.1f}")
    print(f"plugin_overhead_ms_per_turn_p50={plugin:.1f}")
    print(f"plugin_turn_overhead_ratio={plugin / bundled:.2f}")


if __name__ == "__main__":
    main()
