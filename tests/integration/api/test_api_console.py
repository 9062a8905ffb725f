"""The web console in a real headless Chromium (Debian's, driven by Playwright): it logs
in with the token, shows a running job's reward curve growing with each step, and opens a
sampled trajectory with its tool calls. Screenshots are saved as test artifacts
(`ARTFLEET_ARTIFACTS_DIR`, else the test's tmp dir)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from artfleet_cli.fleet import LocalFleet

pytestmark = [pytest.mark.integration]
CHROMIUM = os.environ.get("ARTFLEET_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
STEPS = 3


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("ARTFLEET_ARTIFACTS_DIR") or tmp_path) / "console"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def page(require_infra: Callable[[bool, str], None]) -> Iterator[Any]:
    require_infra(shutil.which(CHROMIUM) is not None, f"no chromium at {CHROMIUM}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        urls: list[str] = []
        page.on("request", lambda request: urls.append(request.url))
        page.requested_urls = urls  # type: ignore[attr-defined]
        try:
            yield page
        finally:
            browser.close()


def _log_in(page: Any, fleet: LocalFleet) -> None:
    page.goto(fleet.api_url + "/")
    page.fill("#token", "wrong-token")
    page.click("#login-form button")
    page.wait_for_selector("#login-error:has-text('Wrong token')")
    page.fill("#token", fleet.token)
    page.click("#login-form button")
    page.wait_for_selector("#jobs")


def test_console_follows_a_running_job_and_shows_tool_calls(
    page: Any, api_fleet: LocalFleet, api: httpx.Client, artifacts: Path
) -> None:
    _log_in(page, api_fleet)
    job = api.post(
        "/train",
        json={"model_name": "console-demo", "project": "console", "num_steps": STEPS,
              "batch_size": 4, "use_ruler": False, "max_turns": 2},
    ).json()  # fmt: skip
    page.goto(f"{api_fleet.api_url}/#/job/{job['job_id']}")
    chart = "svg[data-testid=chart-reward]"
    for step in range(1, STEPS + 1):
        # One more point per finished step, from the live stream (no reload).
        page.wait_for_function(
            f"document.querySelector('{chart}')?.dataset.points === '{step}'", timeout=600_000
        )
        page.screenshot(path=str(artifacts / f"job-step-{step}.png"), full_page=True)
    page.wait_for_selector("#job-state:has-text('succeeded')", timeout=120_000)
    # Each training step's checkpoint, as the trainer lists them on disk (step 0's too).
    page.wait_for_function(
        f"document.querySelectorAll('#checkpoints tr[data-training-step]').length === {STEPS}"
    )
    assert page.locator("svg[data-testid=chart-loss] circle").count() == STEPS
    page.screenshot(path=str(artifacts / "job.png"), full_page=True)

    page.click("nav a[href='#/trajectories']")
    page.wait_for_selector("#trajectories tbody tr[data-path]")
    page.fill("#f-min", "0.5")
    page.fill("#f-scenario", "write-notes")
    page.click("#f-apply")
    page.wait_for_function(
        "document.querySelectorAll('#trajectories tbody tr[data-path]').length === 1"
    )
    page.screenshot(path=str(artifacts / "trajectories.png"), full_page=True)
    page.click("#trajectories tbody tr[data-path]")
    call = page.wait_for_selector("[data-testid=tool-call]")
    assert "bash" in call.inner_text() and "echo draft" in call.inner_text()
    assert "observation" in page.inner_text("#messages")
    assert "policy_version" in page.inner_text("#trajectory-meta")
    assert "reward_process" in page.inner_text("#trajectory-metrics")
    page.screenshot(path=str(artifacts / "trajectory.png"), full_page=True)

    page.click("nav a[href='#/models']")
    page.wait_for_selector("#models tbody tr")
    # the Tinker API's runs, under the jobs' models (their own table, its rows or none yet)
    page.wait_for_selector("#tinker-runs tbody tr")
    page.on("dialog", lambda dialog: dialog.accept())
    with page.expect_response(
        lambda r: r.request.method == "DELETE" and "/models/" in r.url
    ) as deleted:
        page.locator("#models tr:has-text('console-demo') button").click()
    assert deleted.value.status == 204  # its job has ended: the checkpoints go
    page.wait_for_selector("#models tbody tr")  # the page is drawn again
    # The token never travels in a URL (it is a header, from sessionStorage).
    assert not any(api_fleet.token in url for url in page.requested_urls)
