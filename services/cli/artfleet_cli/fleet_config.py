"""What `artfleet fleet up` is told and what it keeps in its workdir.

Settings come from three places, later ones winning: `ARTFLEET_*` variables of the caller's
environment, `--env-file` (dotenv lines) and `--set KEY=VALUE`. Each `ARTFLEET_*` key goes
to the services whose settings read it (derived from their pydantic-settings classes);
other names (a judge's API key, read by the name a reward spec gives) go to every service.

The workdir keeps the ports of its first start (`ports.json`), so a restart serves the same
endpoints; `fleet.env` holds every endpoint and the token as export lines. It also keeps
the settings given with `--env-file` and `--set` (`fleet-settings.json`, private: they may
hold keys), applied at the next start under that start's own, until `--reset-settings`.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import json
import os
import re
import shlex
import socket
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

from pydantic import ValidationError
from pydantic_settings import BaseSettings
from pydantic_settings.exceptions import SettingsError

from artfleet.contracts.env_names import ENV_VAR_NAME

PREFIX = "ARTFLEET_"
PORTS_FILE = "ports.json"
ENV_FILE = "fleet.env"
SETTINGS_FILE = "fleet-settings.json"
# Where each service's settings class lives (imported only when asked: they are light),
# and `fleet up`'s own ("fleet": read by no service).
SETTINGS_CLASSES = {
    "sandbox": "artfleet_sandbox.settings:SandboxSettings",
    "reward": "artfleet_reward.settings:RewardSettings",
    "rollout": "artfleet_rollout.settings:RolloutSettings",
    "trainer": "artfleet_trainer.settings:TrainerSettings",
    "api": "artfleet_api.settings:ApiSettings",
    "inference": "artfleet_inference.settings:InferenceSettings",
    "fleet": "artfleet_cli.fleet_settings:FleetSettings",
}


class ConfigError(ValueError):
    """Bad input to `fleet up` (exit 2); the message names the key, or the file and line."""


class PortsTaken(RuntimeError):
    """Recorded ports another process now holds (exit 1 unless --new-ports)."""

    def __init__(self, taken: Mapping[str, int]) -> None:
        self.taken = dict(taken)
        listed = ", ".join(f"{port} ({name})" for name, port in taken.items())
        super().__init__(f"recorded port(s) in use by another process: {listed}")


# -- settings: parsing and precedence (pure) -------------------------------------------------


def parse_env_file(text: str, source: str) -> dict[str, str]:
    """dotenv lines: `KEY=VALUE`, an optional `export `, `#` comments, values bare (a ` #`
    starts a comment), 'single-quoted' (literal) or "double-quoted" (\\" \\\\ \\n escapes)."""
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            key, value = _assignment(line.removeprefix("export ").lstrip())
            values[key] = _value(value.strip())
        except ValueError as exc:
            raise ConfigError(f"{source}:{number}: {exc}") from None
    return values


def read_env_file(path: Path) -> dict[str, str]:
    """`--env-file`'s settings (ConfigError naming the file, and the line)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--env-file {path}: {exc}") from None
    return parse_env_file(text, str(path))


def parse_sets(items: Iterable[str]) -> dict[str, str]:
    """`--set KEY=VALUE` options; the value is taken as the shell passed it."""
    values: dict[str, str] = {}
    for item in items:
        try:
            key, value = _assignment(item)
        except ValueError as exc:
            raise ConfigError(f"--set {item!r}: {exc}") from None
        values[key] = value
    return values


def _assignment(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    key = key.strip()
    if not equals:
        raise ValueError("expected KEY=VALUE")
    if not ENV_VAR_NAME.match(key):
        raise ValueError(f"{key!r} is not a variable name")
    return key, value


def _value(text: str) -> str:
    if not text or text[0] not in "'\"":
        return re.split(r"\s#", text, maxsplit=1)[0].rstrip()
    quote, chars, i = text[0], [], 1
    escapes = {"n": "\n", "\\": "\\", '"': '"'}
    while i < len(text) and text[i] != quote:
        if quote == '"' and text[i] == "\\" and text[i + 1 : i + 2] in escapes:
            chars.append(escapes[text[i + 1]])
            i += 2
            continue
        chars.append(text[i])
        i += 1
    if i >= len(text):
        raise ValueError(f"no closing {quote}")
    rest = text[i + 1 :].strip()
    if rest and not rest.startswith("#"):
        raise ValueError(f"text after the closing {quote}: {rest!r}")
    return "".join(chars)


def merge_settings(
    environ: Mapping[str, str],
    env_file: Mapping[str, str],
    sets: Mapping[str, str],
    known: Mapping[str, frozenset[str]],
    owned: frozenset[str],
    remembered: Mapping[str, str] | None = None,
) -> tuple[dict[str, str], list[str]]:
    """(settings, ignored): the caller's known `ARTFLEET_*` variables, then the settings
    the workdir remembers (given explicitly at an earlier start), then the env file's,
    then `--set`'s. `known`: service -> the `ARTFLEET_*` names it reads; `owned`: names the
    fleet sets itself (ports, token, its wiring, what fleet.env exports): from the
    environment they are dropped (a sourced fleet.env), given explicitly they are an error.
    `ignored`: `ARTFLEET_*` variables of the environment no service reads."""
    every = frozenset().union(*known.values())
    remembered = remembered or {}
    origins = (
        (f"{SETTINGS_FILE} (remembered; --reset-settings drops it)", remembered),
        ("env file", env_file),
        ("--set", sets),
    )
    for origin, given in origins:
        for key in given:
            check_key(key, origin, every, owned)
    from_environ = {k: v for k, v in environ.items() if k in every and k not in owned}
    ignored = sorted(
        k for k in environ if k.startswith(PREFIX) and k not in every and k not in owned
    )
    return {**from_environ, **remembered, **env_file, **sets}, ignored


def check_key(key: str, origin: str, every: frozenset[str], owned: frozenset[str]) -> None:
    if key in owned:
        raise ConfigError(
            f"{origin}: {key} is set by fleet up itself (its ports, token and paths follow "
            f"--workdir and --engine; {ENV_FILE} in the workdir lists them)"
        )
    if key.startswith(PREFIX) and key not in every:
        close = difflib.get_close_matches(key, sorted(every), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(f"{origin}: no service reads {key}{hint}")


def for_service(settings: Mapping[str, str], reads: frozenset[str]) -> dict[str, str]:
    """The settings one service gets: the `ARTFLEET_*` ones it reads, and every other name."""
    return {k: v for k, v in settings.items() if not k.startswith(PREFIX) or k in reads}


# -- the services' settings classes ----------------------------------------------------------


def settings_class(service: str) -> type[BaseSettings]:
    module, _, name = SETTINGS_CLASSES[service].partition(":")
    cls: type[BaseSettings] = getattr(importlib.import_module(module), name)
    return cls


@cache
def known_keys() -> dict[str, frozenset[str]]:
    """service -> the environment variables its settings class reads."""
    known = {}
    for service in SETTINGS_CLASSES:
        cls = settings_class(service)
        prefix = cls.model_config.get("env_prefix", "")
        known[service] = frozenset(f"{prefix}{name}".upper() for name in cls.model_fields)
    return known


def validate_env(service: str, env: Mapping[str, str]) -> BaseSettings:
    """Parses `service`'s settings from `env` as the service will (ConfigError naming the
    variable), so a bad value fails here instead of in a service's log; returns them."""
    cls = settings_class(service)
    try:
        with _environ(env):
            return cls()
    except ValidationError as exc:
        error = exc.errors()[0]
        key = PREFIX + "_".join(str(p) for p in error["loc"]).upper()
        # A validator's own words, without pydantic's "Value error, ".
        message = (error.get("ctx") or {}).get("error") or error["msg"]
        raise ConfigError(f"{key}: {message} ({_whose(service)} setting)") from None
    except SettingsError as exc:  # a list or dict setting that is not JSON
        found = re.search(r'field "(\w+)"', str(exc))
        key = PREFIX + found.group(1).upper() if found else "a setting"
        raise ConfigError(f"{key}: not valid JSON ({_whose(service)} setting)") from None


def _whose(service: str) -> str:
    return "fleet up's" if service == "fleet" else f"the {service} service's"


@contextlib.contextmanager
def _environ(env: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


# -- ports kept across restarts --------------------------------------------------------------


def plan_ports(
    names: Sequence[str], recorded: Mapping[str, int], pick: Callable[[], int]
) -> dict[str, int]:
    """The recorded port of each name, a distinct new one (`pick`) for names without one."""
    ports = {name: recorded[name] for name in names if name in recorded}
    for name in names:
        while name not in ports:
            port = pick()
            if port not in ports.values():
                ports[name] = port
    return ports


def taken_ports(ports: Mapping[str, int], is_free: Callable[[int], bool]) -> dict[str, int]:
    return {name: port for name, port in ports.items() if not is_free(port)}


def port_is_free(port: int) -> bool:
    """Whether a server can listen on loopback `port` now (SO_REUSEADDR, as servers bind:
    the closing connections of the fleet's last run do not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def load_ports(workdir: Path) -> dict[str, int]:
    path = workdir / PORTS_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
        return {str(k): int(v) for k, v in data.items()}
    except (ValueError, TypeError, AttributeError):
        raise ConfigError(f"{path}: not a ports record; delete it or pass --new-ports") from None


def save_ports(workdir: Path, ports: Mapping[str, int]) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / PORTS_FILE).write_text(json.dumps(dict(ports), indent=1, sort_keys=True) + "\n")


# -- settings remembered across starts ------------------------------------------------------


@dataclass(frozen=True)
class Remembered:
    """The settings earlier starts were given (`--env-file`, `--set`), and when."""

    values: dict[str, str]
    saved_at: datetime

    def shown_date(self) -> str:
        return self.saved_at.astimezone().strftime("%Y-%m-%d %H:%M")


def load_remembered(workdir: Path) -> Remembered | None:
    path = workdir / SETTINGS_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        values = data["values"]
        if not all(isinstance(v, str) for v in values.values()):
            raise TypeError("a value that is not a string")
        saved_at = datetime.fromisoformat(data["saved_at"])
    except (ValueError, TypeError, KeyError, AttributeError):
        raise ConfigError(
            f"{path}: not a settings record; pass --reset-settings to drop it"
        ) from None
    return Remembered({str(k): v for k, v in values.items()}, saved_at)


def save_remembered(workdir: Path, values: Mapping[str, str], now: datetime | None = None) -> None:
    """Private (0600): a setting may be a key (a judge's API key)."""
    record = {"saved_at": (now or datetime.now(UTC)).isoformat(), "values": dict(values)}
    write_private(workdir / SETTINGS_FILE, json.dumps(record, indent=1, sort_keys=True) + "\n")


def forget_settings(workdir: Path) -> bool:
    """Drops the remembered settings; whether there were any."""
    path = workdir / SETTINGS_FILE
    existed = path.is_file()
    path.unlink(missing_ok=True)
    return existed


# -- secrets and the sourceable endpoints file -----------------------------------------------


def write_private(path: Path, text: str) -> None:
    """Writes `text` readable by the owner only (0600 from the first byte), atomically."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(out.fileno(), 0o600)  # an existing tmp file keeps its mode otherwise
        out.write(text)
    os.replace(tmp, path)


def read_secret(path: Path) -> str:
    """A secret kept in the workdir (the token, Redis' password); "" when there is none."""
    return path.read_text().strip() if path.is_file() else ""


def env_file_text(values: Mapping[str, str], comment: str) -> str:
    """`export KEY='value'` lines a POSIX shell can `source`."""
    lines = [f"# {line}" for line in comment.splitlines()]
    lines += [f"export {key}={shlex.quote(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"
