"""Request fields the RPC fuzz sweep found answered with INTERNAL (or UNAVAILABLE): each is
now INVALID_ARGUMENT naming the field (the sweep itself: tests/integration/fuzz/)."""

from __future__ import annotations

import pytest

from artfleet.contracts.errors import InvalidArgument
from artfleet.runtime.rpc.interceptors import MAX_DETAILS_BYTES, bounded_details
from artfleet.specs.job import spec_from_proto
from artfleet.v1 import common_pb2 as pb
from artfleet_rollout.group import check_base_url


@pytest.mark.parametrize("text", ["{not json", "{../..\x00\x01", "[" * 100_000])
def test_an_mcp_config_that_is_no_json_names_the_field(text: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        spec_from_proto(pb.JobSpec(mcp_config=text))
    assert info.value.field == "mcp_config"
    assert str(info.value).startswith("mcp_config: must be a JSON object: ")


def test_an_mcp_config_that_is_json_but_no_server_is_the_specs_own_error() -> None:
    with pytest.raises(InvalidArgument) as info:
        spec_from_proto(pb.JobSpec(mcp_config="-1"))
    assert info.value.field == "mcp_config"
    assert str(info.value) == "mcp_config: must be an object"


@pytest.mark.parametrize(
    "url",
    [
        "http://a\x01b/v1",
        "http://ok/\x7f",
        "http://[::1",
        "ftp://host/v1",
        "nonsense",
        "http:///v1",
    ],
)
def test_a_policy_url_the_client_cannot_request_names_the_field(url: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        check_base_url(url, "model_base_url")
    assert str(info.value).startswith("model_base_url: ")


def test_a_policy_url_the_client_can_request_passes() -> None:
    for url in ("http://127.0.0.1:8000/v1", "https://api.example.com/v1", "http://trainer:8000"):
        check_base_url(url, "model_base_url")


def test_a_status_message_that_quotes_a_huge_input_is_cut() -> None:
    assert bounded_details("steps: must be > 0") == "steps: must be > 0"
    quoted = f"environment 'ü{'x' * 300_000}' is not registered"
    cut = bounded_details(quoted)
    assert len(cut.encode()) <= MAX_DETAILS_BYTES
    assert cut.startswith("environment 'üxx") and cut.endswith(
        f"... ({len(quoted) + 1} bytes, cut)"
    )
