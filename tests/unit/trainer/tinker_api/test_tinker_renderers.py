"""The SmolLM2 renderer ships with the product (artfleet.clients.tinker_renderers) and keeps the
cookbook optional: importing it without tinker-cookbook registers nothing and fails
nothing. Its rendering is checked against SmolLM2's template by the cookbook's own
interpreter (tests/integration/api/test_tinker_cookbook.py)."""

from __future__ import annotations

import importlib
import subprocess
import sys

from artfleet.clients import tinker_renderers


def test_the_renderer_module_imports_without_the_cookbook() -> None:
    assert not tinker_renderers.cookbook_installed()  # not in the fleet's environment
    assert tinker_renderers.register() is False
    assert importlib.reload(tinker_renderers).RENDERER == "artfleet/smollm2"


def test_it_needs_nothing_else_of_artfleet() -> None:
    """A client's environment has the cookbook, not the fleet's dependencies: the module
    imports with the standard library alone (`pip install --no-deps`)."""
    code = (
        "import sys; import artfleet.clients.tinker_renderers as r; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pydantic', 'grpc', 'google', 'yaml', 'torch', 'transformers')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
