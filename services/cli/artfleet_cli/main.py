"""`artfleet`: the command line of the fleet."""

from __future__ import annotations

import typer

from artfleet_cli import demo, envs, evals, fleet_up, jobs, models, rollout

app = typer.Typer(
    help="ArtFleet: train LLM agents with RL on a fleet.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(jobs.app, name="jobs")
app.add_typer(rollout.app, name="rollout")
app.add_typer(evals.app, name="eval")
app.add_typer(models.app, name="models")
app.add_typer(envs.app, name="envs")
app.command("demo")(demo.demo)
fleet = typer.Typer(help="Run the fleet on this machine.", no_args_is_help=True)
fleet.command("up")(fleet_up.fleet_up)
app.add_typer(fleet, name="fleet")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
