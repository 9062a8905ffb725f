"""Shared test plumbing: missing infrastructure skips locally but fails under CI=true."""

from __future__ import annotations

import os

import pytest


def require(condition: bool, why: str) -> None:
    if condition:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"required in CI: {why}")
    pytest.skip(why)
