"""The fleet token check (scheme in any case, spaces tolerated, exact token, an empty
configured token matching nothing) and the OpenAI-style error body."""

from __future__ import annotations

import pytest
from auth_checks import HEADER_CASES, TOKEN, HeaderCase

from artfleet.runtime.auth import (
    bearer_credentials,
    bearer_matches,
    openai_error,
    secret_matches,
)


@pytest.mark.parametrize("case", HEADER_CASES, ids=lambda case: case.label)
def test_every_header_case(case: HeaderCase) -> None:
    assert bearer_matches(case.header, TOKEN) is case.accepted
    if case.header is not None:  # bytes, as ASGI hands headers over, read the same
        assert bearer_matches(case.header.encode(), TOKEN) is case.accepted


@pytest.mark.parametrize(
    "header",
    [f"\t Bearer {TOKEN} \r\n", f"Bearer\t{TOKEN}", f"bEaReR \t {TOKEN}"],
)
def test_whitespace_around_and_between_is_tolerated(header: str) -> None:
    assert bearer_matches(header, TOKEN)


@pytest.mark.parametrize(
    "header",
    [TOKEN, f"Bearer{TOKEN}", f"Bearer {TOKEN} extra", f"Bearer {TOKEN[:-1]}", "Bearer", ""],
)
def test_anything_but_the_token_after_the_scheme_is_refused(header: str) -> None:
    assert not bearer_matches(header, TOKEN)


def test_the_credentials_are_what_follows_the_scheme() -> None:
    assert bearer_credentials("  BEARER   abc  ") == b"abc"
    assert bearer_credentials("Basic abc") is None
    assert bearer_credentials("Bearer") is None
    assert bearer_credentials(None) is None


def test_an_empty_configured_token_matches_nothing() -> None:
    for header in (None, "", "Bearer ", "Bearer", "bearer  "):
        assert not bearer_matches(header, "")
    assert not secret_matches("", "")
    assert not secret_matches(b"", "")


def test_a_header_that_is_not_utf8_is_refused_not_an_error() -> None:
    assert not bearer_matches("Bearer \udcff\udcfe", TOKEN)
    assert not bearer_matches(b"Bearer \xff\xfe", TOKEN)
    assert bearer_matches(f"Bearer {TOKEN}".encode(), TOKEN)


def test_a_non_ascii_token_matches_its_utf8_bytes() -> None:
    assert bearer_matches("Bearer jeton-é", "jeton-é")
    assert bearer_matches("Bearer jeton-é".encode(), "jeton-é")
    assert not bearer_matches("Bearer jeton-e", "jeton-é")


def test_secret_matches_is_exact() -> None:
    assert secret_matches("tml-abc", "tml-abc")
    assert secret_matches(b"abc", "abc")
    assert not secret_matches(" abc", "abc")
    assert not secret_matches("abcd", "abc")


def test_openai_error_has_every_field() -> None:
    assert openai_error("no such model", "NotFoundError", code=404, param="model") == {
        "error": {
            "message": "no such model",
            "type": "NotFoundError",
            "code": 404,
            "param": "model",
        }
    }
    assert openai_error("bad key", code="invalid_api_key") == {
        "error": {
            "message": "bad key",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
            "param": None,
        }
    }
