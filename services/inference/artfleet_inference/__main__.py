"""`artfleet-inference`: settings first, then vLLM and the front."""

from __future__ import annotations

from artfleet.runtime.logs import setup_logging
from artfleet.runtime.service import load_settings, run
from artfleet_inference.settings import InferenceSettings


def main() -> None:
    settings = load_settings(InferenceSettings)
    setup_logging(settings.log_level, "inference")
    from artfleet_inference.app import InferenceApp

    run(InferenceApp(settings))


if __name__ == "__main__":
    main()
