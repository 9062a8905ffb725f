"""The session's shared torch-engine fleet (`torch_fleet` in tests/integration/conftest.py):
redis-server, the trainer serving the real SmolLM2 itself, the Celery rollout worker,
reward and the Docker sandbox. The modules that need "a running fleet" and neither kill,
cut nor restart a process of it run their jobs here, each isolated by its own job names
(`SHARED_FLEET_MODULES` in tests/support/xdist_scopes.py keeps them on one xdist worker).

The fleet carries what those modules need between them: its own deployment label (the
sandbox's containers are counted at the end), a judge key in every service's environment
(never to reach a log), and the `artfleet-mcp-2048` script on PATH for game-2048 jobs.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from chaos_fleet import docker_containers
from fleet_jobs import started
from log_scan import leaked_secrets, log_files
from mcp_2048_script import write_mcp_2048_script

from artfleet_cli.fleet import LocalFleet

JUDGE_KEY_VAR = "ARTFLEET_TEST_JUDGE_API_KEY"


@contextmanager
def shared_torch_fleet(work: Path) -> Iterator[LocalFleet]:
    """Started on entry; on exit stopped, and checked: every service stopped on SIGTERM by
    itself, the sandbox left no container, no log holds the API token or the judge key."""
    bin_dir = write_mcp_2048_script(work / "bin").parent
    deployment = f"artfleet-fleet-test-{os.getpid()}"
    env = {
        "ARTFLEET_DEPLOYMENT": deployment,
        JUDGE_KEY_VAR: secrets.token_urlsafe(24),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    with started(LocalFleet(work / "fleet", extra_env=env)) as fleet:
        yield fleet
    assert docker_containers(deployment) == [], "the sandbox left containers behind"
    assert log_files(fleet.workdir), "the fleet wrote logs"
    wanted = {"API token": fleet.token, "judge key": env[JUDGE_KEY_VAR]}
    assert leaked_secrets(fleet.workdir, wanted) == []
