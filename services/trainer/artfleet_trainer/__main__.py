"""`artfleet-trainer`: settings first, heavy imports (torch, art) after."""

from __future__ import annotations

import os

from artfleet.runtime.service import service_main
from artfleet_trainer.settings import TrainerSettings


def main() -> None:
    # Before torch loads: spinning OpenMP threads stall badly when the cores are shared
    # with rollout workers (docs/benchmarks.md).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    service_main(TrainerSettings, "trainer", "artfleet_trainer.app:TrainerApp")


if __name__ == "__main__":
    main()
