"""`artfleet envs list|show`: the environments a job can name, read where the rollout reads
them (bundled ones and `<loader>:<path>` sources), without a running fleet."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from artfleet_cli import render
from artfleet_cli.client import fail

app = typer.Typer(help="Environments (task sets) jobs can train on.", no_args_is_help=True)
MAX_LISTED = 30  # scenarios listed by `show NAME`; the rest are counted


def _registry() -> Any:
    try:
        from artfleet_rollout import environments  # the rollout's own registry
    except ImportError:
        fail("environments are read with the rollout's code: install artfleet[rollout]")
    return environments


def _load(name: str) -> Any:
    environments = _registry()
    try:
        return environments.get_environment(name)
    except KeyError as exc:  # UnknownEnvironment
        fail(str(exc))
    except ValueError as exc:  # a loader that cannot read its source, bad bundled data
        fail(str(exc))


def _tools(environment: Any) -> str:
    return ", ".join(environment.tools) or "-"


@app.command("list")
def list_envs(
    as_json: bool = typer.Option(False, "--json", help="print the environments as JSON"),
) -> None:
    """Every environment (name, agent, split sizes, tools, and where it comes from: bundled,
    or the package and version that installed it), the loaders, the agent kinds, and
    plugins that failed to load, with their error."""
    environments = _registry()
    from artfleet_rollout.agents.kinds import agent_kinds, broken_agents

    records = []
    for name, source in environments.environment_sources().items():
        try:
            environment = environments.get_environment(name)
        except ValueError:  # a plugin whose factory failed: broken_environments() has it
            continue
        sizes = environment.split_sizes()
        records.append(
            {"name": name, "agent": environment.agent, "train": sizes["train"],
             "test": sizes["test"], "tools": list(environment.tools), "source": str(source)}
        )  # fmt: skip
    broken = [
        {"name": b.name, "kind": what, "error": b.describe(what)}
        for what, found in (
            ("environment", environments.broken_environments()),
            ("agent kind", broken_agents()),
        )
        for b in found.values()
    ]
    loaders = [f"{n}:<path>" for n in environments.list_loaders()]
    agents = {kind: str(source) for kind, source in agent_kinds().items()}
    if as_json:
        listing = {"environments": records, "loaders": loaders, "agents": agents}
        print(json.dumps(listing | {"broken": broken}, indent=2))
        return
    rows = [
        [r["name"], r["agent"], str(r["train"]), str(r["test"]),
         ", ".join(r["tools"]) or "-", r["source"]]
        for r in sorted(records, key=lambda r: r["name"])
    ]  # fmt: skip
    render.listing(("name", "agent", "train", "test", "tools", "source"), rows, ("name",))
    print(f"loaders: {', '.join(loaders)}")
    print("agent kinds: " + ", ".join(f"{k} ({s})" for k, s in sorted(agents.items())))
    for b in broken:
        print(f"broken: {b['error']}")


@app.command("show")
def show(
    name: str = typer.Argument(help="a bundled name or <loader>:<path>"),
    scenario: str = typer.Argument("", help="a scenario id: show it in full"),
) -> None:
    """An environment (its scenarios, and records a loader skipped), or one scenario."""
    environment = _load(name)
    console = Console()
    if scenario:
        try:
            found = environment.get(scenario)
        except KeyError as exc:
            fail(str(exc))
        console.print_json(json.dumps(_scenario(found)))
        return
    sizes = environment.split_sizes()
    console.print(f"[bold]{environment.name}[/bold]: {environment.description}")
    console.print(f"agent: {environment.agent}   train: {sizes['train']}   test: {sizes['test']}")
    console.print(f"tools: {_tools(environment)}")
    for reason, count in sorted(environment.skipped.items()):
        console.print(f"skipped: {count} record(s): {reason}")
    for bad in environment.bad_records.first:  # where to fix them (a job refuses them)
        console.print(f"bad record: {bad}", markup=False, highlight=False)
    table = Table("id", "split", "difficulty", "title")
    scenarios = environment.scenarios()
    for s in scenarios[:MAX_LISTED]:
        table.add_row(s.id, s.split, s.difficulty or "-", s.title)
    console.print(table)
    if len(scenarios) > MAX_LISTED:
        console.print(f"... and {len(scenarios) - MAX_LISTED} more")


def _scenario(s: Any) -> dict[str, Any]:
    """What a user reads about one task (never the known-good `solution`)."""
    shown: dict[str, Any] = {"id": s.id, "split": s.split, "title": s.title}
    shown["instruction"] = s.instruction
    optional = {
        "difficulty": s.difficulty,
        "system": s.system,
        "answer": s.answer,
        "files": sorted(s.files),
        "check": s.check,
        "image": s.image,
    }
    shown.update({k: v for k, v in optional.items() if v})
    if s.mcp is not None:
        shown["mcp_config"] = dict(s.mcp.config)
        if s.mcp.setup is not None:
            shown["setup_tool"] = {
                "name": s.mcp.setup.name,
                "arguments": dict(s.mcp.setup.arguments),
            }
        shown["evaluate_tool"] = {
            "name": s.mcp.evaluate.name,
            "arguments": dict(s.mcp.evaluate.arguments),
        }
    return shown
