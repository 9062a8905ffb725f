"""Property-based runs of the API's whole OpenAPI schema with schemathesis, against a
running service: every operation, valid (positive) and invalid (negative) requests, with
the token. Checks: no 5xx, and every response documented (status, content type, schema).

Shared by tests/integration/api/test_api_fuzz.py (CI-sized) and bench/api_fuzz_bench.py."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Err
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from artfleet_api.models import ErrorOut, EventOut

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
# Runs episodes against whatever endpoint a generated body names (`base_url`): a fuzzer
# would wait on made-up hosts. The fleet tests drive it; everything else is fuzzed.
SKIP = {("POST", "/rollout")}


def _check_stream(response: requests.Response) -> None:
    """A live job's stream does not end while the job runs (a fuzzed job may have 10^5
    steps): its status, content type and first event are checked, then it is closed."""
    assert response.status_code < 500, response.status_code
    if response.status_code != 200:
        assert response.headers["content-type"] == "application/json", response.headers
        ErrorOut.model_validate(response.json())
        return
    assert response.headers["content-type"].startswith("text/event-stream"), response.headers
    fields: dict[str, str] = {}
    # chunk_size=1: a bigger chunk waits for bytes a quiet stream has not sent yet.
    for raw in response.iter_lines(chunk_size=1):
        line = raw.decode()
        if line == "" and "data" in fields:
            break
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    EventOut.model_validate_json(fields["data"])
    assert fields["id"] == str(json.loads(fields["data"])["seq"])


@dataclass
class FuzzReport:
    cases: dict[str, int] = field(default_factory=dict)
    statuses: dict[int, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.cases.values())


def fuzz(base_url: str, token: str, max_examples: int, seed: int = 0) -> FuzzReport:
    headers = {"Authorization": f"Bearer {token}"}
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json", headers=headers)
    report = FuzzReport()
    for result in schema.get_all_operations():
        if isinstance(result, Err):  # a schema error is a finding too
            report.failures.append(f"invalid schema: {result.err()}")
            continue
        operation = result.ok()
        method, path = operation.method.upper(), operation.path
        if (method, path) in SKIP:
            continue
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _fuzz_operation(operation, mode, base_url, headers, max_examples, seed, report)
    return report


def _fuzz_operation(
    operation: Any,
    mode: GenerationMode,
    base_url: str,
    headers: dict[str, str],
    max_examples: int,
    seed: int,
    report: FuzzReport,
) -> None:
    label = f"{operation.method.upper()} {operation.path} {mode.value}"

    @settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=seed == 0,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        streaming = operation.path.endswith("/stream")
        if streaming:  # case.call would read the whole body: a live job's never ends
            kwargs = case.as_transport_kwargs(base_url=base_url, headers=headers)
            response = requests.request(**kwargs, stream=True, timeout=120)
        else:
            response = case.call(base_url=base_url, headers=headers, timeout=120)
        report.cases[label] = report.cases.get(label, 0) + 1
        report.statuses[response.status_code] = report.statuses.get(response.status_code, 0) + 1
        try:
            if streaming:
                _check_stream(response)
            else:
                case.validate_response(response, checks=CHECKS, headers=headers)
        except Exception as exc:  # a check's failure group: recorded with the case
            report.failures.append(f"{label}: {case.as_curl_command()}\n{exc}")
            raise
        finally:
            if streaming:
                response.close()

    try:
        run()
    except Unsatisfiable:
        # Negative mode of an operation whose every input is a string path parameter: no
        # request that violates the schema exists there (any string is a valid segment).
        if mode == GenerationMode.POSITIVE:
            report.failures.append(f"{label}: no case could be generated")
    except Exception as exc:
        if not report.failures or label not in report.failures[-1]:
            report.failures.append(f"{label}: {type(exc).__name__}: {exc}")
