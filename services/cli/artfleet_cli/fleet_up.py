"""`artfleet fleet up`: a local fleet kept up (its processes watched and restarted:
fleet_watch.py) until Ctrl-C or SIGTERM, with its settings, ports and endpoints remembered
in the workdir; and the engine choice `artfleet demo` shares."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import NoReturn

import typer

from artfleet.runtime.ports import PortHold
from artfleet_cli import render
from artfleet_cli.client import fail
from artfleet_cli.fleet import PORT_NAMES, LocalFleet, isolation_notice
from artfleet_cli.fleet_binaries import VLLM_PYTHON, vllm_python
from artfleet_cli.fleet_config import (
    ENV_FILE,
    ConfigError,
    PortsTaken,
    Remembered,
    env_file_text,
    forget_settings,
    known_keys,
    load_ports,
    load_remembered,
    merge_settings,
    parse_sets,
    plan_ports,
    port_is_free,
    read_env_file,
    read_secret,
    save_ports,
    save_remembered,
    taken_ports,
    write_private,
)
from artfleet_cli.fleet_metrics import CONFIG_FILE
from artfleet_cli.fleet_process import FleetStopped, ServiceExited, StartTimeout
from artfleet_cli.fleet_watch import FleetRun, describe_exit

WorkdirOpt = typer.Option(Path(".artfleet"), "--workdir", help="state, logs and checkpoints")
EngineOpt = typer.Option(
    "auto",
    "--engine",
    help="who serves the policy: vllm (the inference service), torch (the trainer's own "
    "server), auto (vllm where a vLLM environment is found, else torch)",
)
ENGINES = ("auto", "vllm", "torch")


def pick_engine(engine: str, python: str = "") -> str:
    """`auto` → vllm when a vLLM environment is found (`python`, or what make install
    builds), else torch; an explicit `vllm` without one is a usage error (exit 2)."""
    if engine not in ENGINES:
        render.console.print(f"--engine: one of {', '.join(ENGINES)}", markup=False)
        raise SystemExit(2)
    found = bool(python or vllm_python())
    if engine == "vllm" and not found:
        render.console.print(
            "--engine vllm: no Python with vLLM here (make install builds .venv-vllm; or set "
            "ARTFLEET_INFERENCE_VLLM_PYTHON)",
            markup=False,
        )
        raise SystemExit(2)
    if engine == "auto":
        engine = "vllm" if found else "torch"
        if not found:
            render.console.print(
                "note: no vLLM environment found (make install builds .venv-vllm): the "
                "trainer serves the policy itself",
                markup=False,
            )
    return engine


SetOpt = typer.Option(
    [],
    "--set",
    metavar="KEY=VALUE",
    help="a setting (ARTFLEET_*, or a variable such as a judge's API key); repeatable; "
    "wins over --env-file, which wins over this environment's ARTFLEET_* variables",
)
EnvFileOpt = typer.Option(
    None,
    "--env-file",
    dir_okay=False,
    help="settings as KEY=VALUE lines (# comments, optional quotes and `export`)",
)
StartTimeoutOpt = typer.Option(
    None,
    "--start-timeout",
    metavar="SECONDS",
    help="how long every process may take to be ready (default: the setting "
    "ARTFLEET_FLEET_START_TIMEOUT_S, 180); raise it on a busy machine",
)


def fleet_up(
    workdir: Path = WorkdirOpt,
    engine: str = EngineOpt,
    env_file: Path | None = EnvFileOpt,
    settings: list[str] = SetOpt,
    new_ports: bool = typer.Option(
        False, "--new-ports", help="pick new ports instead of the ones the workdir recorded"
    ),
    reset_settings: bool = typer.Option(
        False, "--reset-settings", help="drop the settings remembered from earlier starts"
    ),
    start_timeout: float | None = StartTimeoutOpt,
) -> None:
    """Start a local fleet and keep it up until Ctrl-C (or SIGTERM).

    Settings, later ones winning: this environment's ARTFLEET_* variables, the settings
    remembered from earlier starts, then --env-file, then --set. Each reaches the services
    whose settings read it; an ARTFLEET_* name no service reads is an error. --env-file
    and --set values are remembered in WORKDIR/fleet-settings.json (private) and applied
    at the next start until --reset-settings. The first start in a workdir records its
    ports and a restart reuses them; every endpoint and the token are written to
    WORKDIR/fleet.env (`source` it). WORKDIR/prometheus.yml scrapes every service; a
    `prometheus` on PATH is run on it. A process that exits is reported and restarted,
    up to ARTFLEET_FLEET_MAX_RESTARTS times within ARTFLEET_FLEET_RESTART_WINDOW_S; one
    more exit stops the fleet (exit 1)."""
    if start_timeout is not None and not start_timeout > 0:
        fail("--start-timeout: a number of seconds above 0")
    fleet = _configured_fleet(
        workdir.resolve(), engine, env_file, settings, new_ports, reset_settings
    )
    own = fleet.own_settings()  # checked already (exit 2)
    timeout_s = own.fleet_start_timeout_s if start_timeout is None else start_timeout
    fleet.prometheus = shutil.which("prometheus") or ""
    if notice := isolation_notice():
        render.console.print(notice, markup=False)
    fleet.announce = _say
    run = FleetRun(fleet, own, _say)
    try:  # whichever way it ends, every process it started is stopped
        _start(run, fleet, timeout_s)
        _announce_up(fleet)
        reason = run.watch()
        if run.signal is not None:
            _say(f"{run.signal.name}: stopping the fleet")
    finally:
        run.stop()
    if reason is not None:
        fail(f"{reason}; the fleet is stopped (logs in {fleet.workdir / 'logs'})", 1)


def _say(line: str) -> None:
    """What the fleet does while it runs, on the fleet's output (plain: lines stay whole)."""
    print(f"fleet up: {line}", flush=True)


def _announce_up(fleet: LocalFleet) -> None:
    env_path = fleet.workdir / ENV_FILE
    comment = f"artfleet fleet up in {fleet.workdir} ({fleet.engine}): source this file"
    write_private(env_path, env_file_text(fleet.endpoints(), comment))
    write_private(fleet.workdir / "token", fleet.token + "\n")
    # Plain print: rich would break long lines; the token stays in the private files.
    print("\n".join(banner(fleet, env_path)), flush=True)


def _start(run: FleetRun, fleet: LocalFleet, timeout_s: float) -> None:
    """The fleet started, or `fleet up` ended (what it started stopped) saying why."""
    try:
        run.start(timeout_s)
        fleet.announce = None  # from now on the watcher says what it starts again
    except FleetStopped:
        assert run.signal is not None
        print(f"fleet up: stopped by {run.signal.name} while starting", file=sys.stderr)
        raise SystemExit(128 + run.signal.value) from None
    except ServiceExited as exc:
        what = f"{exc.name} {describe_exit(exc.code)} while starting"
        _failed(what, exc.name, exc.tail, 2 if exc.code == 2 else 1)
    except StartTimeout as exc:
        raise_it = f"--start-timeout (now {timeout_s:g} s) or ARTFLEET_FLEET_START_TIMEOUT_S"
        if exc.name in fleet.inference_names:  # vLLM ends itself past its own
            raise_it += " and ARTFLEET_INFERENCE_START_TIMEOUT_S"
        what = f"{exc.name} was not ready in time ({exc}): on a busy machine raise {raise_it}"
        _failed(what, exc.name, exc.tail, 1)


def _failed(what: str, name: str, tail: str, code: int) -> NoReturn:
    """A failed start's error: what, and the end of `name`'s log since this start."""
    lines = tail.splitlines()[-15:]
    shown = f"; logs/{name}.log ends:\n" + "\n".join(lines) if lines else f" (logs/{name}.log)"
    fail(what + shown, code)


def _configured_fleet(
    workdir: Path,
    engine: str,
    env_file: Path | None,
    sets: list[str],
    new_ports: bool,
    reset_settings: bool = False,
) -> LocalFleet:
    """The fleet `fleet up` starts: settings merged and checked (exit 2), the workdir's
    ports, token, Redis password and remembered settings reused (exit 1 when another
    process holds a port)."""
    password_path = workdir / "redis-password"
    try:
        given = read_env_file(env_file) if env_file else {}
        set_values = parse_sets(sets)
        remembered = None if reset_settings else load_remembered(workdir)
        held = PortHold()
        fleet = LocalFleet(
            workdir,
            ports=plan_ports(PORT_NAMES, {} if new_ports else load_ports(workdir), held.pick),
            held=held,
        )
        fleet.token = read_secret(workdir / "token") or fleet.token
        fleet.redis_password = read_secret(password_path) or fleet.redis_password
        fleet.settings, ignored = merge_settings(
            os.environ,
            given,
            set_values,
            known_keys(),
            fleet.owned_keys(),
            remembered.values if remembered else None,
        )
        fleet.engine = pick_engine(engine, fleet.settings.get(VLLM_PYTHON, ""))
        fleet.check_settings()
    except ConfigError as exc:
        fail(str(exc))
    for key in ignored:
        render.console.print(f"note: no service reads {key} (environment): ignored", markup=False)
    if taken := taken_ports(fleet.ports, port_is_free):
        how = "pass --new-ports to pick others" if not new_ports else "try again"
        fail(f"{PortsTaken(taken)} (another fleet up in {workdir}?): {how}", 1)
    save_ports(workdir, fleet.ports)
    write_private(password_path, fleet.redis_password + "\n")
    _remember_settings(workdir, remembered, {**given, **set_values}, reset_settings)
    return fleet


def _remember_settings(
    workdir: Path, remembered: Remembered | None, given: dict[str, str], reset: bool
) -> None:
    """Says what the remembered settings are (never their values: keys among them), and
    remembers this start's --env-file and --set over them."""
    if reset and forget_settings(workdir):
        render.console.print("dropped the remembered settings (--reset-settings)", markup=False)
    if remembered is not None and remembered.values:
        count, replaced = len(remembered.values), len(remembered.values.keys() & given.keys())
        by_now = f", {replaced} replaced by this start's" if replaced else ""
        render.console.print(
            f"using the settings remembered from {remembered.shown_date()}: "
            f"{count} value{'s' if count != 1 else ''}{by_now}; --reset-settings to drop them",
            markup=False,
            soft_wrap=True,
        )
    if given:
        save_remembered(workdir, {**(remembered.values if remembered else {}), **given})


def banner(fleet: LocalFleet, env_path: Path) -> list[str]:
    """What `fleet up` prints once up: short lines (no token: it is in `env_path`)."""
    if fleet.prometheus:
        metrics = f"Prometheus at http://{fleet.prometheus_address} (docs/deployment.md)"
    else:
        metrics = f"{CONFIG_FILE} in the workdir (no prometheus on PATH to run it)"
    return [
        f"fleet up: {fleet.engine} serves the policy; Ctrl-C stops the fleet.",
        f"console and HTTP API: {fleet.api_url} (log in with the token)",
        f"metrics: {metrics}",
        "endpoints and token (the same after a restart): run",
        f"  source {shlex.quote(str(_shown(env_path)))}",
    ]


def _shown(path: Path) -> Path:
    """`path` relative to the working directory when under it: shorter lines."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path
