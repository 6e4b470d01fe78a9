"""What `POST /v1/feedback` and `POST /v1/outcomes` do before they look at what a post says: its
credential (`FeedbackAuth`), its caller's rate (`TokenBuckets`), both before the body is read,
then the body — JSON (else 415), within its size (else 413), one pydantic model with unknown fields
refused (else 400 naming each problem). Each refusal before the body is counted by `rejected`."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

import orjson
from fastapi import Request
from pydantic import BaseModel, ValidationError

from proxy.core import RequestError, TooManyRequests, UnsupportedMediaType

from .admin import read_limited
from .feedback_auth import FeedbackAuth, FeedbackAuthError, FeedbackCredential
from .token_buckets import TokenBuckets

B = TypeVar("B", bound=BaseModel)


class PostIntake:
    """Admits and reads the posts of one endpoint. `noun` names what is posted in messages
    ("feedback", "the outcome"); `rejected` counts a refusal by its reason."""

    def __init__(
        self,
        auth: FeedbackAuth,
        buckets: TokenBuckets,
        rejected: Callable[[str], None],
        *,
        noun: str,
        max_bytes: int,
    ) -> None:
        self.auth = auth
        self.buckets = buckets
        self.rejected = rejected
        self.noun = noun
        self.max_bytes = max_bytes

    def admit(self, request: Request) -> FeedbackCredential:
        """The post's credential, if it has one and its caller is within its rate (before the
        body is read: a refused post costs nothing more)."""
        try:
            credential = self.auth.credential(request)
        except FeedbackAuthError as exc:
            self.rejected(exc.reason)
            raise
        wait = self.buckets.take(credential.caller)
        if wait > 0:
            self.rejected("rate_limited")
            raise TooManyRequests(
                f"too much {self.noun} from this caller; retry in {math.ceil(wait)} s", wait
            )
        return credential

    async def body(self, request: Request, model: type[B]) -> B:
        """The post's body as `model`. Raises `UnsupportedMediaType`, `PayloadTooLarge` or
        `RequestError`."""
        if "json" not in request.headers.get("content-type", ""):
            raise UnsupportedMediaType("content-type must be application/json")
        raw = await read_limited(request, self.max_bytes, self.noun)
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise RequestError(f"{self.noun} is not valid JSON ({exc})") from None
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()
            )
            raise RequestError(f"{self.noun} is malformed: {problems}") from None

    def check_signed(self, credential: FeedbackCredential, request_id: str) -> None:
        """`FeedbackAuth.check_signed`, the refusal counted."""
        try:
            self.auth.check_signed(credential, request_id)
        except FeedbackAuthError as exc:
            self.rejected(exc.reason)
            raise
