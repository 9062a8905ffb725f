"""schemathesis over the whole OpenAPI schema of the running API (CI-sized; the longer
run is bench/api_fuzz_bench.py): no 5xx, every response as documented."""

from __future__ import annotations

import os
import time

import httpx
import pytest
from api_fuzz import SKIP, fuzz

from artfleet_cli.fleet import LocalFleet

pytestmark = [pytest.mark.integration]
ACTIVE = {"queued", "running", "cancelling"}


def _cancel_all(api: httpx.Client) -> None:
    """Fuzzed bodies that are valid start real jobs: stop them, so later tests have the
    trainer to themselves."""
    deadline = time.monotonic() + 600
    while True:
        active = [
            j for j in api.get("/jobs", params={"limit": 0}).json()["jobs"] if j["state"] in ACTIVE
        ]
        if not active:
            return
        assert time.monotonic() < deadline, f"jobs still active: {active}"
        for job in active:
            if job["state"] != "cancelling":
                api.post(f"/jobs/{job['id']}/cancel")
        time.sleep(0.5)


def test_whole_schema_fuzz(api_fleet: LocalFleet, api: httpx.Client) -> None:
    examples = int(os.environ.get("ARTFLEET_API_FUZZ_EXAMPLES", "6"))
    try:
        report = fuzz(api_fleet.api_url, api_fleet.token, max_examples=examples)
    finally:
        _cancel_all(api)
    print(f"api fuzz: {report.total} cases over {len(report.cases)} operation/modes")
    for label, count in sorted(report.cases.items()):
        print(f"  {label}: {count}")
    print(f"  statuses: {dict(sorted(report.statuses.items()))}")
    assert not report.failures, "\n\n".join(report.failures[:5])
    # Every operation of the schema but those api_fuzz.SKIP names ran valid cases (a route
    # added later is fuzzed the day it lands); those with bodies or bounded parameters ran
    # invalid ones too.
    paths = api.get("/openapi.json").json()["paths"]
    operations = {(m.upper(), p) for p, ops in paths.items() for m in ops} - SKIP
    positive = {label.rsplit(" ", 1)[0] for label in report.cases if label.endswith("positive")}
    assert positive == {f"{m} {p}" for m, p in operations}, sorted(positive)
    assert len(report.cases) >= 19 and report.total >= 90
    assert not {code for code in report.statuses if code >= 500}
