"""Hostile messages for every RPC of every service, against the real servers (CI size).

Every method of every service in the proto is called with messages hypothesis derives from
the descriptors (see fuzz_kit), with a valid token. Each call must return or fail with a
clear status and a message, never INTERNAL/UNKNOWN or a hang, and the server must still
say SERVING afterwards. `bench/fuzz_bench.py` runs the same with >= 1000 cases a service.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fuzz_kit import SPECIAL_STRINGS, Verdict, fuzz_service, methods, serving
from service_fleet import SERVICES, FuzzFleet, live_ids, running_fleet, seeds

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

EXAMPLES = 40  # per service: CI-sized; the bench runs thousands


@pytest.fixture(scope="module")
def fleet(redis_url: str) -> Iterator[FuzzFleet]:
    with running_fleet(redis_url) as started:
        yield started


@pytest.mark.parametrize("service", SERVICES)
def test_every_rpc_answers_hostile_input_clearly(fleet: FuzzFleet, service: str) -> None:
    ids = live_ids(fleet)
    strings = [*SPECIAL_STRINGS, *ids]
    verdicts: list[Verdict] = []

    def judge(verdict: Verdict) -> None:
        verdicts.append(verdict)
        assert not verdict.failure, verdict.failure  # hypothesis shrinks it and prints it

    fuzz_service(fleet, service, EXAMPLES, strings, judge, ids, seeds())
    assert len(verdicts) >= EXAMPLES // 2
    called = {v.method.rsplit("/", 1)[-1] for v in verdicts}
    # Random choice may miss a method in a CI-sized run: each one missed gets its own few.
    missed = [m.name for m in methods(service) if m.name not in called]
    for name in missed:
        fuzz_service(fleet, service, 5, strings, judge, ids, seeds(), only=[name])
    called = {v.method.rsplit("/", 1)[-1] for v in verdicts}
    assert called == {m.name for m in methods(service)}, "every method is fuzzed"
    assert fleet.call(serving(fleet.target(service)), timeout=30)
