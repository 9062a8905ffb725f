"""`artfleet-trainer`: settings first, heavy imports (torch, art) after."""

from __future__ import annotations

import os

from artfleet.runtime.logs import setup_logging
from artfleet.runtime.service import load_settings, run
from artfleet_trainer.settings import TrainerSettings


def main() -> None:
    settings = load_settings(TrainerSettings)
    setup_logging(settings.log_level, "trainer")
    # Before torch loads: spinning OpenMP threads stall badly when the cores are shared
    # with rollout workers (docs/benchmarks.md).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from artfleet_trainer.app import TrainerApp

    run(TrainerApp(settings))


if __name__ == "__main__":
    main()
