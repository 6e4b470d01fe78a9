"""`POST /v1/feedback`: user corrections and ratings, joined to the exchange they are about.

    {"request_id": "…", "corrected": true, "correction": "150 kg", "score": 2, "label": "policy"}

`request_id` is the `x-mirrorgate-request-id` of the answer; at least one other field is required.
Every post is authenticated (`proxy.api.feedback_auth`: an application token, or the answer's
signed `x-mirrorgate-feedback-token`; 401 without) and rate-limited per caller (429 with
`Retry-After`) before its body is read, and is stored with its caller's id; refusals are counted
in `mirrorgate_feedback_rejected_total{reason}`. `user` (with an application token) names the end
user the application posts for.
A correction is what `proxy.core.is_correction` says (`corrected: true` or a non-empty
`correction` text); the stored `corrected` flag and `mirrorgate_feedback_total{kind="correction"}`
follow it.
Each of correction (`corrected`/`correction`), `score` and `label` is stored once per request: a
repeated post of the same kind is acknowledged and changes nothing. Feedback is written to the
store before the answer (201), so an acknowledged correction is never lost; while the store is
unavailable the answer is 503 and nothing is stored (send it again). Errors are raised and answered
by `proxy.api.errors`.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator

from proxy.core import (
    Arm,
    ExchangeRecord,
    FeedbackRecord,
    NotFound,
    is_correction,
)
from proxy.observability import GatewayMetrics
from proxy.store import FeedbackStore, Store, StoreUnavailableError

from .errors import store_unavailable
from .feedback_auth import FeedbackAuth
from .post_intake import PostIntake
from .token_buckets import TokenBuckets

MAX_FEEDBACK_BYTES = 1024 * 1024
_SEND_AGAIN = "the store is unavailable; send the feedback again"
_SERVING_ARMS = (Arm.PRIMARY, Arm.CANARY, Arm.FALLBACK)


class FeedbackBody(BaseModel):
    """The request body (unknown fields are refused)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    request_id: str = Field(min_length=1, max_length=128)
    corrected: bool | None = None
    correction: str | None = Field(None, max_length=100_000)
    score: int | None = Field(None, ge=1, le=5)
    label: str | None = Field(None, min_length=1, max_length=200)
    user: str | None = Field(None, min_length=1, max_length=200)
    """The end user an application token posts for (refines the caller; ignored otherwise)."""

    @model_validator(mode="after")
    def _something_to_say(self) -> FeedbackBody:
        if (self.corrected, self.correction, self.score, self.label) == (None, None, None, None):
            raise ValueError("give at least one of corrected, correction, score, label")
        return self


@dataclass(frozen=True, slots=True)
class ServedAnswer:
    """What feedback needs to know about the answer a user saw (no bodies: many of these are
    kept in memory)."""

    route: str
    target: str
    arm: Arm
    rule: str | None
    rule_version: str | None


class RecentExchanges:
    """The answers served to recent requests, so feedback that arrives before the recorder
    wrote the exchange still joins. A record sink; bounded (oldest forgotten first).

    Each answer is kept as a plain tuple of strings, not as a `ServedAnswer`: the cyclic
    collector stops tracking an exact tuple that holds only strings and None, while 20,000
    instances of a class (or tuples holding the `Arm` member) stay tracked, and walking them was
    nearly all of a running gateway's full collections once its start-up objects were frozen.
    """

    def __init__(self, size: int = 20_000) -> None:
        self.size = size
        """Answers remembered (a few MB); older feedback joins through the store instead."""
        self._by_id: OrderedDict[str, tuple[str, str, str, str | None, str | None]] = OrderedDict()

    def __call__(self, record: object) -> None:
        if (
            isinstance(record, ExchangeRecord)
            and record.arm in _SERVING_ARMS
            and record.http_status
        ):
            self._by_id[record.request_id] = (
                record.route, record.target, record.arm.value, record.rule, record.rule_version
            )  # fmt: skip
            if len(self._by_id) > self.size:
                self._by_id.popitem(last=False)

    def get(self, request_id: str) -> ServedAnswer | None:
        kept = self._by_id.get(request_id)
        if kept is None:
            return None
        route, target, arm, rule, rule_version = kept
        return ServedAnswer(route, target, Arm(arm), rule, rule_version)


class FeedbackService:
    """Validates, joins, stores and counts feedback."""

    def __init__(
        self,
        exchanges: Store,
        feedback: FeedbackStore,
        recent: RecentExchanges,
        metrics: GatewayMetrics,
        auth: FeedbackAuth,
        buckets: TokenBuckets,
    ) -> None:
        self.exchanges = exchanges
        self.feedback = feedback
        self.recent = recent
        self.metrics = metrics
        self.auth = auth
        self.buckets = buckets
        self.intake = PostIntake(
            auth,
            buckets,
            lambda reason: metrics.feedback_rejected.labels(reason).inc(),
            noun="feedback",
            max_bytes=MAX_FEEDBACK_BYTES,
        )

    async def handle(self, request: Request) -> JSONResponse:
        """The answer to one `POST /v1/feedback`: 201 and what was recorded. Raises
        `GatewayError`s (and `Unavailable` while the store cannot be reached)."""
        credential = self.intake.admit(request)
        body = await self.intake.body(request, FeedbackBody)
        self.intake.check_signed(credential, body.request_id)
        caller = credential.caller_of(body.user)
        return JSONResponse(await self.submit(body, caller), status_code=201)

    async def submit(self, body: FeedbackBody, caller: str | None = None) -> dict[str, Any]:
        exchange = self.recent.get(body.request_id) or await self._lookup(body.request_id)
        if exchange is None:
            raise NotFound(f"no exchange with request id '{body.request_id[:128]}'")
        now = datetime.now(UTC)
        base: dict[str, Any] = {
            "request_id": body.request_id, "route": exchange.route, "target": exchange.target,
            "arm": exchange.arm, "created_at": now, "rule": exchange.rule,
            "rule_version": exchange.rule_version, "caller": caller,
        }  # fmt: skip
        records: list[tuple[FeedbackRecord, str | None]] = []
        if body.corrected is not None or body.correction is not None:
            said = FeedbackRecord(
                **base, kind="correction", corrected=bool(body.corrected),
                correction=body.correction,
            )  # fmt: skip
            corrected = is_correction(said)
            counted_as = "correction" if corrected else None
            records.append((replace(said, corrected=corrected), counted_as))
        if body.score is not None:
            sentiment = "positive" if body.score >= 4 else "negative" if body.score <= 2 else None
            records.append((FeedbackRecord(**base, kind="score", score=body.score), sentiment))
        if body.label is not None:
            records.append((FeedbackRecord(**base, kind="label", label=body.label), None))
        recorded: list[str] = []
        duplicates: list[str] = []
        for record, metric_kind in records:
            try:
                new = await asyncio.to_thread(self.feedback.add, record)
            except StoreUnavailableError as exc:
                raise store_unavailable(exc, _SEND_AGAIN) from exc
            (recorded if new else duplicates).append(record.kind)
            if new and metric_kind is not None:
                self.metrics.feedback.labels(
                    exchange.route, exchange.target, exchange.arm.value, metric_kind
                ).inc()
        return {"request_id": body.request_id, "recorded": recorded, "duplicates": duplicates}

    async def _lookup(self, request_id: str) -> ServedAnswer | None:
        try:
            found = await asyncio.to_thread(self.exchanges.query, request_id=request_id, limit=20)
        except StoreUnavailableError as exc:
            raise store_unavailable(exc, _SEND_AGAIN) from exc
        serving = [r for r in found if r.arm in _SERVING_ARMS and r.http_status]
        if not serving:
            return None
        r = serving[-1]
        return ServedAnswer(r.route, r.target, r.arm, r.rule, r.rule_version)


# Built once per process, like every API router (proxy/api/admin.py says why).
feedback_router = APIRouter()


@feedback_router.post("/v1/feedback")
async def feedback(request: Request) -> JSONResponse:
    """Answered by the `FeedbackService` of the gateway serving `request`:
    `app.state.feedback_service`, set by the app's wiring."""
    service: FeedbackService = request.app.state.feedback_service
    return await service.handle(request)
