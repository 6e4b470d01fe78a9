"""What feedback and outcome posts share before their content is read: the credential and the
caller's rate first (a refused post is counted by its reason and its body never read), then a
JSON body of bounded size, validated into one model with every problem named."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fastapi import Request
from pydantic import BaseModel, ConfigDict

from proxy.api import FeedbackAuth, TokenBuckets
from proxy.api.feedback_auth import FeedbackAuthError
from proxy.api.post_intake import PostIntake
from proxy.core import (
    FeedbackTokens,
    PayloadTooLarge,
    RequestError,
    TooManyRequests,
    UnsupportedMediaType,
)


class Note(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    text: str


def request(body: bytes, **headers: str) -> Request:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    scope = {
        "type": "http", "method": "POST", "path": "/v1/notes", "client": ("127.0.0.1", 5),
        "headers": [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()],
    }  # fmt: skip
    return Request(scope, receive)


def intake(rejected: list[str], *, open_without_token: bool = False, burst: int = 5) -> PostIntake:
    auth = FeedbackAuth(
        ["app-token"], FeedbackTokens(3600, b"k" * 32), open_without_token=open_without_token,
        tokens_env="NOTE_TOKENS",
    )  # fmt: skip
    return PostIntake(
        auth, TokenBuckets(0.001, burst), rejected.append, noun="the note", max_bytes=100
    )


def test_a_post_without_a_credential_is_refused_and_counted() -> None:
    rejected: list[str] = []
    with pytest.raises(FeedbackAuthError, match="NOTE_TOKENS"):
        intake(rejected).admit(request(b"{}"))
    with pytest.raises(FeedbackAuthError, match="not right"):
        intake(rejected).admit(request(b"{}", authorization="Bearer nope"))
    assert rejected == ["unauthenticated", "bad_token"]


def test_a_caller_beyond_its_burst_waits_and_is_counted() -> None:
    rejected: list[str] = []
    notes = intake(rejected, burst=2)
    for _ in range(2):
        assert notes.admit(request(b"", authorization="Bearer app-token")).application
    with pytest.raises(TooManyRequests, match="too much the note from this caller"):
        notes.admit(request(b"", authorization="Bearer app-token"))
    assert rejected == ["rate_limited"]


@pytest.mark.parametrize(
    ("body", "headers", "error", "message"),
    [
        (b'{"text": "hi"}', {"content_type": "text/plain"}, UnsupportedMediaType, "json"),
        (b'{"text": "' + b"x" * 200 + b'"}', {}, PayloadTooLarge, "larger"),
        (b'{"text": ', {}, RequestError, "the note is not valid JSON"),
        (b'{"text": 1, "extra": 2}', {}, RequestError, "text: Input should be a valid string"),
    ],
)
def test_the_body_is_json_of_bounded_size_and_validated(
    body: bytes, headers: dict[str, str], error: type[Exception], message: str
) -> None:
    all_headers = {"content_type": "application/json", **headers}
    with pytest.raises(error, match=message) as caught:
        asyncio.run(intake([]).body(request(body, **all_headers), Note))
    if "extra" in body.decode():
        assert "extra: Extra inputs are not permitted" in str(caught.value)


def test_a_good_body_reads_into_its_model() -> None:
    note = asyncio.run(
        intake([]).body(request(b'{"text": "hi"}', content_type="application/json"), Note)
    )
    assert note == Note(text="hi")
