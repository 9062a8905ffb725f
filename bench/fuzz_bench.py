"""RPC fuzzing at size: hostile messages for every RPC of every service.

    python bench/fuzz_bench.py [--cases N]

Starts the four services in-process, as their entrypoints build them, on port 0 against a
real redis-server, then sends N (default 1000) hypothesis-generated messages per service
(derived from the proto descriptors: see tests/integration/fuzz/fuzz_kit.py) with a valid
token, after the sweep the CI test runs too (every field of every request message, a few
hostile values each). A case fails when its answer is INTERNAL/UNKNOWN, an error without a
message, or no answer by its deadline; after each service its health must still say SERVING.

Prints a line per service and method (outcome counts), the failures, and last
`rpc_fuzz_cases=` (random cases), `rpc_fuzz_field_cases=` (sweep cases; `rpc_fuzz_fields=`
fields swept), `rpc_fuzz_failures=` (of both) and `rpc_fuzz_cases_per_s=` (random cases).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "integration" / "fuzz"), str(ROOT / "tests" / "support")]

from fuzz_kit import SPECIAL_STRINGS, Verdict, fuzz_service, serving, sweep_fields  # noqa: E402
from service_fleet import SERVICES, FuzzFleet, live_ids, running_fleet, seeds  # noqa: E402

from artfleet.runtime.service import free_port  # noqa: E402
from artfleet_cli.fleet import redis_server_binary  # noqa: E402


@contextmanager
def redis_server() -> Iterator[str]:
    import redis

    port = free_port()
    with tempfile.TemporaryDirectory(prefix="fuzz-redis-") as data:
        cmd = [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1"]
        proc = subprocess.Popen([*cmd, "--dir", data, "--save", ""], stdout=subprocess.DEVNULL)
        url = f"redis://127.0.0.1:{port}/0"
        deadline = time.monotonic() + 30
        while True:
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    proc.kill()
                    raise
                time.sleep(0.1)
        try:
            yield url
        finally:
            proc.terminate()
            proc.wait(10)


@dataclass
class Run:
    swept: list[Verdict] = field(default_factory=list)  # the sweep's
    fields: set[tuple[str, str]] = field(default_factory=set)  # (method, field) swept
    verdicts: list[Verdict] = field(default_factory=list)  # the random cases'
    random_s: float = 0.0


def fuzz_one(fleet: FuzzFleet, service: str, cases: int, run: Run) -> list[Verdict]:
    """One service's sweep and random cases, added to `run`; returns their verdicts."""
    ids = live_ids(fleet)
    strings = [*SPECIAL_STRINGS, *ids]
    results = sweep_fields(fleet, service, strings, ids, seeds())
    run.fields |= {(case.method.full_name, case.path) for case, _ in results}
    swept = [verdict for _, verdict in results]
    verdicts: list[Verdict] = []
    started = time.monotonic()
    fuzz_service(fleet, service, cases, strings, verdicts.append, ids, seeds())
    run.random_s += time.monotonic() - started
    if not fleet.call(serving(fleet.target(service)), timeout=30):
        verdicts.append(Verdict(service, "NOT_SERVING", f"{service}: not SERVING afterwards"))
    run.swept += swept
    run.verdicts += verdicts
    return swept + verdicts


def report(service: str, verdicts: list[Verdict]) -> None:
    by_method: dict[str, Counter[str]] = {}
    for verdict in verdicts:
        by_method.setdefault(verdict.method, Counter())[verdict.outcome] += 1
    for method, counts in sorted(by_method.items()):
        print(f"  {method}: " + ", ".join(f"{k}={v}" for k, v in counts.most_common()))
    failures = [v.failure for v in verdicts if v.failure]
    for failure in failures[:20]:
        print(f"  FAILURE {failure}")
    print(f"{service}: cases={len(verdicts)} failures={len(failures)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000, help="per service")
    args = parser.parse_args()
    run = Run()
    with redis_server() as url, running_fleet(url) as fleet:
        for service in SERVICES:
            report(service, fuzz_one(fleet, service, args.cases, run))
    failures = sum(1 for v in run.swept + run.verdicts if v.failure)
    print(f"rpc_fuzz_cases={len(run.verdicts)}")
    print(f"rpc_fuzz_field_cases={len(run.swept)}")
    print(f"rpc_fuzz_fields={len(run.fields)}")
    print(f"rpc_fuzz_failures={failures}")
    print(f"rpc_fuzz_cases_per_s={len(run.verdicts) / run.random_s:.1f}")


if __name__ == "__main__":
    main()
