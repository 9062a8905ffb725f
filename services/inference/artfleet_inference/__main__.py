"""`artfleet-inference`: settings first, then vLLM and the front."""

from __future__ import annotations

from artfleet.runtime.service import service_main
from artfleet_inference.settings import InferenceSettings


def main() -> None:
    service_main(InferenceSettings, "inference", "artfleet_inference.app:InferenceApp")


if __name__ == "__main__":
    main()
