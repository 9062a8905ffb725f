"""`artfleet-rollout`: settings first, heavy imports after."""

from __future__ import annotations

from artfleet.runtime.logs import setup_logging
from artfleet.runtime.service import load_settings
from artfleet_rollout.settings import RolloutSettings


def main() -> None:
    settings = load_settings(RolloutSettings)
    setup_logging(settings.log_level, "rollout")
    from artfleet_rollout.app import RolloutProcess

    RolloutProcess(settings).run()


if __name__ == "__main__":
    main()
