"""The HUD integration's shapes: a one-server `mcp_config`, and its `config.yaml`'s
`environments:` and `training:` blocks read as job spec keys.

    environments:
      2048:                          # the entry the spec's `environment` names, or the only one
        mcp_config: {local: {command: artfleet-mcp-2048, args: []}}
        max_turns: 15
    training:
      default:                       # `default`, or the only profile: job spec keys
        learning_rate: 1e-5

becomes `mcp_config` (the server every scenario runs against) and `max_turns`, and
`environment` becomes the taskset: the entry's `taskset` (our one addition, in place of
HUD's `dataset_map`: `hud:<path>`), else a bundled one for a HUD environment we ship
(`2048` -> `game-2048`), else what `environment` already names (`hud:<path>`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from artfleet.specs.base import FieldError

ENVIRONMENTS_KEY = "environments"
TRAINING_KEY = "training"
DEFAULT_PROFILE = "default"
ENTRY_KEYS = ("mcp_config", "max_turns", "taskset")
# HUD environment names whose taskset we bundle, and the environment that holds it.
HUD_TASKSETS = {"2048": "game-2048"}


def check_mcp_config(config: Any) -> dict[str, Any]:
    """A one-server `mcp_config` (`{name: {command, args, ...}}`, `{name: {url}}`, or
    `{docker: {image}}`), as the HUD task loader and the job spec take it; raises
    ValueError saying what is wrong."""
    if not isinstance(config, dict) or len(config) != 1:
        raise ValueError("mcp_config must hold exactly one server")
    ((name, server),) = config.items()
    if not isinstance(server, dict):
        raise ValueError(f"mcp_config.{name} must be a mapping")
    return config


def from_environments(data: dict[str, Any], check_max_turns: Callable[[Any], Any]) -> None:
    """Replaces `environments` in the job spec `data` by the chosen entry's keys; keys the
    spec sets itself win. Raises FieldError naming the key that is wrong."""
    block = data.pop(ENVIRONMENTS_KEY)
    if not isinstance(block, dict) or not block:
        raise FieldError((ENVIRONMENTS_KEY,), "must map an environment name to its settings")
    entries = {str(name): entry for name, entry in block.items()}
    name = _pick(entries, data.get("environment"))
    entry = entries[name]
    if not isinstance(entry, dict):
        raise FieldError((ENVIRONMENTS_KEY, name), f"must be a mapping ({', '.join(ENTRY_KEYS)})")
    for key in entry:
        if key not in ENTRY_KEYS:
            known = ", ".join(ENTRY_KEYS)
            raise FieldError((ENVIRONMENTS_KEY, name, str(key)), f"unknown key; known: {known}")
    if "mcp_config" not in entry:
        raise FieldError((ENVIRONMENTS_KEY, name, "mcp_config"), "is required")
    try:
        data.setdefault("mcp_config", check_mcp_config(entry["mcp_config"]))
        if "max_turns" in entry:
            data.setdefault("max_turns", check_max_turns(entry["max_turns"]))
    except FieldError as exc:
        raise FieldError((ENVIRONMENTS_KEY, name, *exc.loc), exc.message) from None
    except ValueError as exc:
        raise FieldError((ENVIRONMENTS_KEY, name, "mcp_config"), str(exc)) from None
    if str(data.get("environment", name)) != name:
        return  # `environment` names the taskset itself
    taskset = entry.get("taskset", HUD_TASKSETS.get(name))
    if not isinstance(taskset, str) or not taskset:
        raise FieldError(
            (ENVIRONMENTS_KEY, name, "taskset"),
            f"HUD environment {name!r} has no bundled taskset (bundled: "
            f"{', '.join(sorted(HUD_TASKSETS))}); name its tasks: taskset: hud:<path>",
        )
    data["environment"] = taskset


def from_training(data: dict[str, Any], known: Collection[str]) -> None:
    """Replaces `training` in the job spec `data` by its `default` (or only) profile's keys,
    which must be job spec keys (`known`); keys the spec sets itself win."""
    block = data.pop(TRAINING_KEY)
    if not isinstance(block, dict) or not block:
        raise FieldError((TRAINING_KEY,), "must map a profile name to job spec keys")
    profiles = {str(name): profile for name, profile in block.items()}
    if DEFAULT_PROFILE in profiles:
        name = DEFAULT_PROFILE
    elif len(profiles) == 1:
        name = next(iter(profiles))
    else:
        names = ", ".join(sorted(profiles))
        raise FieldError((TRAINING_KEY,), f"has no {DEFAULT_PROFILE!r} profile among: {names}")
    profile = profiles[name]
    if not isinstance(profile, dict):
        raise FieldError((TRAINING_KEY, name), "must be a mapping of job spec keys")
    for key, value in profile.items():
        if key not in known or key in (ENVIRONMENTS_KEY, TRAINING_KEY):
            raise FieldError((TRAINING_KEY, name, str(key)), "unknown key (not a job spec key)")
        data.setdefault(key, value)


def _pick(entries: dict[str, Any], environment: Any) -> str:
    """The entry `environment` names, or the only one."""
    if environment is not None and str(environment) in entries:
        return str(environment)
    if len(entries) == 1:
        return next(iter(entries))
    names = ", ".join(sorted(entries))
    if environment is None:
        raise FieldError(("environment",), f"is required to pick one of environments: {names}")
    raise FieldError(("environment",), f"names none of environments: {names}")
