"""Signed feedback tokens: bound to one request id, expiring, unforgeable without the key."""

from __future__ import annotations

import pytest

from proxy.core.feedback_token import FeedbackTokens, TokenVerdict, caller_id

KEY = b"k" * 32
NOW = 1_800_000_000.0
DAY = 24 * 3600.0


def tokens(key: bytes = KEY) -> FeedbackTokens:
    return FeedbackTokens(7 * DAY, key)


def test_a_token_is_valid_for_its_request_until_it_expires() -> None:
    token = tokens().issue("req-1", NOW)
    assert token is not None and token.startswith("mgf1.")
    assert tokens().verify(token, "req-1", NOW + 6 * DAY) is TokenVerdict.VALID
    assert tokens().verify(token, "req-1", NOW + 7 * DAY + 1) is TokenVerdict.EXPIRED


def test_a_token_is_worth_nothing_for_another_request_or_under_another_key() -> None:
    token = tokens().issue("req-1", NOW)
    assert token is not None
    assert tokens().verify(token, "req-2", NOW) is TokenVerdict.FORGED
    assert tokens(b"x" * 32).verify(token, "req-1", NOW) is TokenVerdict.FORGED


def test_moving_the_expiry_forward_breaks_the_signature() -> None:
    token = tokens().issue("req-1", NOW - 8 * DAY)
    assert token is not None
    prefix, expiry, mac = token.split(".")
    assert tokens().verify(token, "req-1", NOW) is TokenVerdict.EXPIRED
    stretched = f"{prefix}.{int(expiry) + 2 * int(DAY)}.{mac}"
    assert tokens().verify(stretched, "req-1", NOW) is TokenVerdict.FORGED


@pytest.mark.parametrize(
    "token",
    ["", "mgf1", "mgf1..", "mgf2.1.abc", "mgf1.-5.abc", "mgf1.12x.abc", "mgf1.1.", "a" * 500,
     "mgf1.9999999999999.abc", "mgf1.1.\u00e9\u00e9"],
)  # fmt: skip
def test_anything_else_is_malformed_or_forged(token: str) -> None:
    assert tokens().verify(token, "req-1", NOW) in (TokenVerdict.MALFORMED, TokenVerdict.FORGED)
    assert tokens().verify(token, "req-1", NOW) is not TokenVerdict.VALID


def test_without_a_key_nothing_is_issued_or_accepted() -> None:
    keyless = FeedbackTokens(DAY)
    assert not keyless.ready and keyless.issue("req-1", NOW) is None
    token = tokens().issue("req-1", NOW)
    assert token is not None and keyless.verify(token, "req-1", NOW) is TokenVerdict.MALFORMED
    keyless.load(KEY)
    assert keyless.ready and keyless.verify(token, "req-1", NOW) is TokenVerdict.VALID
    with pytest.raises(ValueError, match="16 bytes"):
        keyless.load(b"short")


def test_caller_ids_are_short_stable_and_hide_the_secret() -> None:
    app = caller_id("app", "sk-feedback-0123456789")
    assert app == caller_id("app", "sk-feedback-0123456789") and app.startswith("app:")
    assert len(app) == len("app:") + 8 and "0123456789" not in app
    assert caller_id("app", "another-token-000000") != app
