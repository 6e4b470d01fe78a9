"""Feedback credentials: application tokens and signed per-request tokens, open only on loopback
with nothing configured; each post stored with its caller; replicas share the signing key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from proxy.core.feedback_token import caller_id
from proxy.store.feedback import FeedbackStore
from tests.conftest import InProcessGateway, wait_until
from tests.proxy.gateway.test_exchange_openai import MESSAGES

APP_TOKEN = "fb-app-token-0123456789"
OTHER_APP = "fb-other-app-9876543210"
TOKENS_ENV = {"MIRRORGATE_FEEDBACK_TOKENS": f"{APP_TOKEN}, {OTHER_APP}"}
KEY_ENV = {"MIRRORGATE_FEEDBACK_SIGNING_KEY": "s" * 40}


def answer(gw: InProcessGateway) -> tuple[str, str]:
    """(request id, feedback token) of one answer."""
    response = gw.http.post("/v1/chat/completions", json={"model": "echo", "messages": MESSAGES})
    assert response.status_code == 200
    return response.headers["x-mirrorgate-request-id"], response.headers[
        "x-mirrorgate-feedback-token"
    ]


def post(gw: InProcessGateway, body: dict[str, Any], **headers: str) -> Any:
    return gw.http.post("/v1/feedback", json=body, headers=headers)


def rejected(gw: InProcessGateway, reason: str) -> float:
    value = gw.gateway.registry.get_sample_value(
        "mirrorgate_feedback_rejected_total", {"reason": reason}
    )
    return value or 0.0


def callers(gw: InProcessGateway, request_id: str) -> list[str | None]:
    return [f.caller for f in FeedbackStore(gw.gateway.store).query(request_id=request_id)]


def test_an_application_token_is_a_caller_and_vouches_for_its_users(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway(env=TOKENS_ENV)
    first, _ = answer(gw)
    ok = post(gw, {"request_id": first, "corrected": True}, authorization=f"Bearer {APP_TOKEN}")
    assert ok.status_code == 201
    assert callers(gw, first) == [caller_id("app", APP_TOKEN)]
    second, _ = answer(gw)
    body = {"request_id": second, "score": 1, "user": "u-42"}
    assert post(gw, body, authorization=f"bearer {OTHER_APP}").status_code == 201
    assert callers(gw, second) == [f"{caller_id('app', OTHER_APP)}/{caller_id('user', 'u-42')}"]


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "unauthenticated"),
        ({"authorization": "Bearer fb-app-token-012345678"}, "bad_token"),  # one short
        ({"authorization": f"Basic {APP_TOKEN}"}, "bad_token"),
        ({"authorization": "Bearer "}, "bad_token"),
    ],
)
def test_without_a_valid_credential_feedback_is_401_and_stores_nothing(
    start_gateway: Callable[..., InProcessGateway], headers: dict[str, str], reason: str
) -> None:
    gw = start_gateway(env=TOKENS_ENV)
    request_id, _ = answer(gw)
    response = post(gw, {"request_id": request_id, "corrected": True}, **headers)
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
    assert APP_TOKEN not in response.text
    assert FeedbackStore(gw.gateway.store).query() == []
    assert rejected(gw, reason) == 1


def test_a_signed_token_beside_a_foreign_authorization_header_still_counts(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    # A UI on a site with its own bearer auth: that header is not ours, the signed token is.
    gw = start_gateway(env=TOKENS_ENV)
    request_id, token = answer(gw)
    headers = {
        "authorization": "Bearer the-sites-own-session",
        "x-mirrorgate-feedback-token": token,
    }
    assert post(gw, {"request_id": request_id, "score": 5}, **headers).status_code == 201
    (caller,) = callers(gw, request_id)
    assert caller is not None and caller.startswith("addr:")


def test_a_signed_token_is_good_for_its_own_answer_only(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway(env=KEY_ENV)
    mine, token = answer(gw)
    other, _ = answer(gw)
    signed = {"x-mirrorgate-feedback-token": token}
    wrong = post(gw, {"request_id": other, "corrected": True}, **signed)
    assert wrong.status_code == 401
    assert "not valid for request id" in wrong.json()["error"]["message"]
    assert rejected(gw, "bad_token") == 1
    assert post(gw, {"request_id": mine, "corrected": True}, **signed).status_code == 201
    (caller,) = callers(gw, mine)
    assert caller is not None and caller.startswith("addr:")
    assert callers(gw, other) == []


def test_a_public_listener_needs_a_token_even_with_nothing_configured(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    env = {"MIRRORGATE_ADMIN_TOKEN": "admin-token-0123456789"}
    gw = start_gateway(extra={"server": {"host": "0.0.0.0"}}, env=env)
    request_id, token = answer(gw)  # signed with the key the store made
    assert post(gw, {"request_id": request_id, "score": 2}).status_code == 401
    signed = post(gw, {"request_id": request_id, "score": 2}, **{
        "x-mirrorgate-feedback-token": token})  # fmt: skip
    assert signed.status_code == 201


def test_on_loopback_with_nothing_configured_feedback_is_open(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway()
    request_id, _ = answer(gw)
    assert post(gw, {"request_id": request_id, "score": 4}).status_code == 201
    (caller,) = callers(gw, request_id)
    assert caller is not None and caller.startswith("addr:")


def test_replicas_on_one_store_accept_each_others_tokens(
    start_gateway: Callable[..., InProcessGateway], tmp_path: Any
) -> None:
    db = f"sqlite:///{tmp_path / 'shared.db'}"
    env = {"MIRRORGATE_ADMIN_TOKEN": "admin-token-0123456789"}
    public = {"server": {"host": "0.0.0.0"}}
    one = start_gateway(db_url=db, extra=public, env=env)
    two = start_gateway(db_url=db, extra=public, env=env)
    request_id, token = answer(one)
    wait_until(lambda: one.gateway.store.query(request_id=request_id), what="the exchange written")
    response = post(two, {"request_id": request_id, "corrected": True}, **{
        "x-mirrorgate-feedback-token": token})  # fmt: skip
    assert response.status_code == 201


def test_a_caller_over_its_rate_gets_429_with_retry_after(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway(
        extra={"server": {"feedback_rate_per_s": 0.01, "feedback_burst": 3}}, env=TOKENS_ENV
    )
    ids = [answer(gw)[0] for _ in range(5)]
    auth = {"authorization": f"Bearer {APP_TOKEN}"}
    statuses = [post(gw, {"request_id": i, "corrected": True}, **auth).status_code for i in ids]
    assert statuses == [201, 201, 201, 429, 429]
    limited = post(gw, {"request_id": ids[4], "corrected": True}, **auth)
    assert limited.status_code == 429
    assert int(limited.headers["retry-after"]) >= 1
    assert limited.json()["error"]["code"] == "rate_limit_exceeded"
    assert rejected(gw, "rate_limited") == 3
    # Another application has its own bucket; what was refused was not stored.
    other = post(gw, {"request_id": ids[4], "corrected": True}, authorization=f"Bearer {OTHER_APP}")
    assert other.status_code == 201
    assert sum(len(callers(gw, i)) for i in ids) == 4


def test_a_signed_token_for_an_operation_is_one_of_its_requests_and_unexpired() -> None:
    from proxy.api import FeedbackAuth
    from proxy.api.feedback_auth import FeedbackAuthError, FeedbackCredential
    from proxy.core import FeedbackTokens

    now = [1_000_000.0]
    tokens = FeedbackTokens(60, b"k" * 32)
    auth = FeedbackAuth([], tokens, open_without_token=False, tokens_env="X",
                        clock=lambda: now[0])  # fmt: skip
    token = tokens.issue("r2", now[0])
    assert token is not None
    signed = FeedbackCredential("addr:1", signed_token=token)
    auth.check_signed_for_any(signed, ["r1", "r2", "r3"])
    auth.check_signed_for_any(FeedbackCredential("app:1", application=True), [])
    with pytest.raises(FeedbackAuthError) as other:
        auth.check_signed_for_any(signed, ["r1", "r3"])
    assert other.value.reason == "bad_token"
    with pytest.raises(FeedbackAuthError) as none:
        auth.check_signed_for_any(signed, [])
    assert none.value.reason == "bad_token"
    now[0] += 3600
    with pytest.raises(FeedbackAuthError) as late:
        auth.check_signed_for_any(signed, ["r1", "r2"])
    assert late.value.reason == "expired"


def test_a_signing_key_from_the_variable_stays_out_of_the_store(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway(env=KEY_ENV)
    with gw.gateway.store.engine.connect() as conn:
        names = {row[0] for row in conn.exec_driver_sql("SELECT name FROM signing_keys")}
    # The replicas' other shared keys are made all the same.
    assert names == {"console-sessions", "console-reviewer-ids", "experiment-units"}
    _, token = answer(gw)
    assert token  # signed with the variable's key
