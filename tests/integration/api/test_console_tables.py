"""The console's job list and job page in a real headless Chromium, against the API's
bodies served by a stub (Playwright answers every request: no fleet, a few seconds): a
model column in the list, only the checkpoints the trainer has on disk, `–` for the loss
of a step that trained nothing, a step's scorer errors with their message, and its failed
episodes by type with the warning of a step that lost too many, and its sampler/trainer
mismatch."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from repo_paths import ROOT

from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2
from artfleet_api.mapping import checkpoints_out, job_out

pytestmark = [pytest.mark.integration]
CHROMIUM = os.environ.get("ARTFLEET_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
STATIC = ROOT / "services" / "api" / "artfleet_api" / "static"
ORIGIN = "http://console.test"
SCORER_ERROR = "ruler: invalid_output: ContextWindowExceededError: maximum context length is 2048"
FAILURE_WARNING = "6/8 episodes failed (more than 25%): 5 AssertionError, 1 KeyError; first: ..."
MISMATCH_WARNING = "sampler/trainer mismatch (vllm, policy lag mean 1 max 1): 8.0% of ..."


def _job() -> tuple[pb.Job, dict[str, Any]]:
    job = pb.Job(id="j1", state=pb.JOB_STATE_FAILED, completed_steps=3, policy="agent-j1@3")
    job.spec.name, job.spec.project, job.spec.steps = "agent", "p", 5
    job.spec.base_model = "smollm2-135m-instruct"
    job.error = f"ScoringFailed: ... {SCORER_ERROR}"
    job.steps.add(step=1, reward_mean=0.5, trained_sequences=8, loss=0.1234, step_seconds=2)
    for step in (2, 3):  # every reward zeroed by the judge: nothing trained
        job.steps.add(
            step=step,
            trained_sequences=0,
            loss=0.0,
            scorer_errors=2,
            scorer_error=SCORER_ERROR,
            scoring_failed=True,
        )
    job.steps[0].episodes, job.steps[0].episodes_failed = 8, 1
    job.steps[0].staleness_mean, job.steps[0].staleness_max = 1.0, 1
    job.steps[0].mismatch.CopyFrom(
        pb.SamplerMismatch(engine="vllm", tokens=200, k3=0.0123, outside_0_5_2=0.08,
                           warning=MISMATCH_WARNING)
    )  # fmt: skip
    job.steps[0].episode_failures["KeyError"] = 1
    lossy = job.steps[2]
    lossy.episodes, lossy.episodes_failed, lossy.failure_warning = 8, 6, FAILURE_WARNING
    lossy.episode_failures.update({"AssertionError": 5, "KeyError": 1})
    job.resumes.add(state=pb.JOB_STATE_FAILED, error="RuntimeError: judge down", completed_steps=1)
    info = trainer_pb2.ModelInfo(name="agent-j1")
    for step in (0, 1, 3):  # retention deleted step 2's
        info.checkpoints.add(step=step)
    body = job_out(job)
    body.checkpoints = checkpoints_out(job, info)
    listed = job_out(job)
    return job, {"one": body.model_dump(mode="json"), "list": listed.model_dump(mode="json")}


@pytest.fixture
def page(require_infra: Callable[[bool, str], None]) -> Iterator[Any]:
    require_infra(shutil.which(CHROMIUM) is not None, f"no chromium at {CHROMIUM}")
    from playwright.sync_api import sync_playwright

    _, bodies = _job()

    def answer(route: Any) -> None:
        path = route.request.url.removeprefix(ORIGIN).split("?")[0]
        if path == "/":
            route.fulfill(path=str(STATIC / "index.html"))
        elif path.startswith("/static/"):
            route.fulfill(path=str(STATIC / path.removeprefix("/static/")))
        elif path == "/jobs":
            route.fulfill(json={"jobs": [bodies["list"]]})
        elif path == "/jobs/j1":
            route.fulfill(json=bodies["one"])
        else:
            route.fulfill(status=404, body=json.dumps({"error": path}))

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            page = browser.new_page()
            page.route("**/*", answer)
            page.goto(ORIGIN + "/")
            page.fill("#token", "any-token")
            page.click("#login-form button")
            page.wait_for_selector("#jobs tbody tr[data-job]")
            yield page
        finally:
            browser.close()


def test_the_job_list_has_a_model_column(page: Any) -> None:
    headers = page.locator("#jobs thead th").all_inner_texts()
    cells = page.locator("#jobs tbody tr[data-job] td").all_inner_texts()
    assert headers[:3] == ["Job", "Model", "State"]
    assert cells[:3] == ["j1", "p/agent", "failed"]


def test_the_job_page_shows_checkpoints_on_disk_untrained_losses_and_scorer_errors(
    page: Any,
) -> None:
    page.click("#jobs tbody tr[data-job]")
    page.wait_for_selector("#checkpoints tbody tr")
    # Only what the trainer listed: step 2's checkpoint is gone.
    assert page.locator("#checkpoints tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.step)"
    ) == ["0", "1", "3"]
    checkpoint = page.locator("#checkpoints tr[data-step='3'] td").all_inner_texts()
    assert checkpoint[1] == "agent-j1@3" and checkpoint[3] == "–"
    assert page.locator("#checkpoints tr[data-step='1'] td").all_inner_texts()[3] == "0.1234"
    steps = {
        row[0]: row
        for row in page.locator("#steps tbody tr").evaluate_all(
            "rows => rows.map(r => [...r.cells].map(c => c.innerText))"
        )
    }
    assert steps["1"][3] == "0.1234" and steps["1"][5] == "–"
    assert steps["2"][3] == "–"  # trained_sequences 0: no loss, not 0.0000
    assert steps["3"][5] == f"2 groups, every group lost: {SCORER_ERROR}"
    assert (
        page.inner_text("#scorer-errors") == f"step 3: 2 groups, every group lost: {SCORER_ERROR}"
    )


def test_the_job_page_shows_its_resumes(page: Any) -> None:
    page.click("#jobs tbody tr[data-job]")
    page.wait_for_selector("#job-resumed")
    assert (
        page.inner_text("#job-resumed")
        == "1× · last after step 1, was failed: RuntimeError: judge down"
    )


def test_the_job_page_shows_failed_episodes_by_type_and_the_latest_warning(page: Any) -> None:
    page.click("#jobs tbody tr[data-job]")
    page.wait_for_selector("#episode-failures")
    rows = page.locator("#steps tbody tr").evaluate_all(
        "rows => rows.map(r => [r.dataset.step, r.cells[6].innerText, r.cells[6].className])"
    )
    assert rows == [
        ["1", "1/8 (1 KeyError)", ""],
        ["2", "–", ""],
        ["3", "6/8 (5 AssertionError, 1 KeyError)", "error"],  # past the share: it warned
    ]
    assert page.inner_text("#episode-failures") == f"step 3: {FAILURE_WARNING}"


def test_the_job_page_shows_the_sampler_trainer_mismatch(page: Any) -> None:
    page.click("#jobs tbody tr[data-job]")
    page.wait_for_selector("#mismatch-warning")
    rows = page.locator("#steps tbody tr").evaluate_all(
        "rows => rows.map(r => [r.dataset.step, r.cells[7].innerText, r.cells[7].className])"
    )
    assert rows == [
        ["1", "k3 0.012 · 8.0% ∉ [0.5, 2] (vllm, lag 1.00)", "error"],
        ["2", "–", ""],  # nothing trained: not measured
        ["3", "–", ""],
    ]
    assert page.inner_text("#mismatch-warning") == f"step 1: {MISMATCH_WARNING}"
    assert page.get_attribute("[data-testid=chart-mismatch]", "data-points") == "1"
