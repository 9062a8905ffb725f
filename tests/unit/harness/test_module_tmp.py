"""`module_tmp`: a module's folders go when its tests pass and stay when one fails (CI's
disk filled up with the folders of passing modules)."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

MODULE = """
import pytest

@pytest.fixture(scope="module")
def folder(module_tmp):
    path = module_tmp("{name}")
    (path / "checkpoint").write_text("weights")
    return path

def test_first(folder):
    assert folder.is_dir()

def test_second(folder):
    assert {second}
"""


def test_a_passing_modules_folders_go_and_a_failing_ones_stay(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest("from module_tmp import module_tmp  # noqa: F401")
    pytester.makepyfile(
        test_passing=MODULE.format(name="passing", second="True"),
        test_failing=MODULE.format(name="failing", second="False"),
    )
    base = pytester.path / "base"
    result = pytester.runpytest("-p", "no:xdist", "-p", "no:cacheprovider", f"--basetemp={base}")
    result.assert_outcomes(passed=3, failed=1)
    assert not (base / "passing0").exists()
    assert (base / "failing0" / "checkpoint").read_text() == "weights"
