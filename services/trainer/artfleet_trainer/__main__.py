"""`artfleet-trainer`: settings first, heavy imports (torch, art) after."""

from __future__ import annotations

import os

from artfleet.runtime.logs import setup_logging
from artfleet.runtime.service import load_settings, service_main
from artfleet_trainer import launch
from artfleet_trainer.settings import TrainerSettings


def main() -> None:
    # Before torch loads: spinning OpenMP threads stall badly when the cores are shared
    # with rollout workers (docs/benchmarks.md).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    settings = load_settings(TrainerSettings)
    role = launch.role(settings)
    if role == "launch":  # this node's ranks, under torchrun (launch.py)
        raise SystemExit(launch.run_ranks(settings))
    if role == "follower":
        setup_logging(settings.log_level, f"trainer-rank{os.environ['RANK']}")
        launch.follower_main(settings)
        return
    service_main(TrainerSettings, "trainer", "artfleet_trainer.app:TrainerApp")


if __name__ == "__main__":
    main()
