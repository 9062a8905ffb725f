"""Property-based fuzzing of the API's whole OpenAPI schema (schemathesis), longer than
the CI-sized run in tests/integration/api/test_api_fuzz.py, against a real local fleet.

    python bench/api_fuzz_bench.py [--examples N]

Prints each operation's case count, then `name=value` lines: the cases, the failures
(no 5xx; every response as documented), and `fuzz_rate_ratio` = fuzzed requests/s over a
baseline measured in the same run (authenticated `GET /jobs`, a trainer round trip each).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from api_fleet import api_fleet
from api_fuzz import fuzz


def baseline_rate(url: str, token: str, requests: int = 200) -> float:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as client:
        started = time.monotonic()
        for _ in range(requests):
            client.get("/jobs", params={"limit": 10}).raise_for_status()
        return requests / (time.monotonic() - started)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=60, help="cases per operation and mode")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="api-fuzz-bench-") as work:
        fleet = api_fleet(Path(work))
        fleet.start()
        try:
            base = baseline_rate(fleet.api_url, fleet.token)
            started = time.monotonic()
            report = fuzz(fleet.api_url, fleet.token, max_examples=args.examples, seed=1)
            seconds = time.monotonic() - started
        finally:
            fleet.stop()
    for label, count in sorted(report.cases.items()):
        print(f"  {label}: {count}")
    for failure in report.failures[:5]:
        print(failure, file=sys.stderr)
    print(f"statuses={dict(sorted(report.statuses.items()))}")
    print(f"api_fuzz_operations={len(report.cases)}")
    print(f"api_fuzz_cases={report.total}")
    print(f"api_fuzz_failures={len(report.failures)}")
    print(f"api_fuzz_5xx={sum(n for code, n in report.statuses.items() if code >= 500)}")
    print(f"baseline_requests_per_s={base:.1f}")
    print(f"fuzz_rate_ratio={report.total / seconds / base:.3f}")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
