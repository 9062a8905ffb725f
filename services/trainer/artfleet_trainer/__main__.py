"""`artfleet-trainer`: settings first, heavy imports (torch, art) after."""

from __future__ import annotations

from artfleet.logs import setup_logging
from artfleet.service import load_settings, run
from artfleet_trainer.settings import TrainerSettings


def main() -> None:
    settings = load_settings(TrainerSettings)
    setup_logging(settings.log_level, "trainer")
    from artfleet_trainer.app import TrainerApp

    run(TrainerApp(settings))


if __name__ == "__main__":
    main()
