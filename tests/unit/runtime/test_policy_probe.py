"""The one check of the policy endpoint (`artfleet.runtime.health.probe_policy`): what the
API's /health, `fleet up`'s readiness wait and the inference container's healthcheck
(`python -m artfleet.runtime.healthcheck --policy URL`) ask, against a stand-in endpoint."""

from __future__ import annotations

from concurrent import futures

import pytest
from fake_policy import fake_policy

from artfleet.runtime import healthcheck
from artfleet.runtime.health import probe_policy
from artfleet.runtime.service import free_port

TOKEN = "probe-test-token-0123456789"


def test_a_policy_listing_its_models_to_the_token_is_ok() -> None:
    with fake_policy(TOKEN) as policy:
        ok, detail = probe_policy(policy.base_url + "/", TOKEN)
    assert ok, detail
    assert detail == f"serves 1 model(s) at {policy.base_url}/models"


def test_a_refused_token_a_policy_not_serving_and_no_answer_are_down() -> None:
    with fake_policy(TOKEN) as policy:
        refused = probe_policy(policy.base_url, "wrong-token")
        policy.serving = False
        loading = probe_policy(policy.base_url, TOKEN)
    assert refused == (False, f"401: the fleet token is refused at {policy.base_url}/models")
    assert loading[0] is False and loading[1].startswith("503 ")
    ok, detail = probe_policy(f"http://127.0.0.1:{free_port()}/v1", TOKEN, timeout_s=1)
    assert not ok and detail.startswith("no answer from http://127.0.0.1:")


def test_a_detail_never_shows_credentials_of_the_url() -> None:
    port = free_port()
    ok, detail = probe_policy(f"http://user:secret@127.0.0.1:{port}/v1?key=k", TOKEN, 1)
    assert not ok and "secret" not in detail and "key=" not in detail


def test_the_container_healthcheck_asks_the_same_with_the_fleet_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with fake_policy(TOKEN) as policy:
        monkeypatch.setenv("ARTFLEET_API_TOKEN", TOKEN)
        assert healthcheck.main(["--policy", policy.base_url]) == 0
        monkeypatch.setenv("ARTFLEET_API_TOKEN", "another-fleets-token")
        assert healthcheck.main(["--policy", policy.base_url]) == 1
    assert "token is refused" in capsys.readouterr().err


def test_a_grpc_server_on_the_port_is_not_a_policy_endpoint() -> None:
    # Found by the inference outage bench: after a restart the port was someone else's, and
    # its HTTP/2 answer raised http.client.BadStatusLine out of fleet up's readiness wait.
    import grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        ok, detail = probe_policy(f"http://127.0.0.1:{port}/v1", TOKEN, timeout_s=5)
    finally:
        server.stop(None)
    assert not ok
    assert "does not answer HTTP/1.1" in detail or "answered, but not" in detail
