"""`POST /v1/outcomes`: what happened to a business operation, joined to its exchanges; and
`GET /admin/operations/{id}`, the operation summed up.

    {"operation_id": "ticket-42", "completed": true, "adopted": false, "corrected": false,
     "value": 12.5, "labels": {"channel": "chat"}}

`operation_id` is the `x-mirrorgate-operation` its requests carried; at least one other field is
required. Each of `completed`, `adopted`, `corrected`, `value` and `labels` is an outcome kind,
stored once per operation: a repeated kind is acknowledged (`duplicates`) and changes nothing,
and concurrent posts of one kind store one row (the table's unique key, on every replica).

A post is admitted like feedback (`proxy.api.post_intake`: an application token, or the signed
`x-mirrorgate-feedback-token` of any answer of the operation; rate-limited per caller, refusals
counted in `mirrorgate_outcomes_rejected_total{reason}`), and joins the operation's exchanges in
the store or still in the recorder's queue (`RecentOperations`); an operation with no client call
known is 404. Outcomes are written before the answer (201): an acknowledged outcome is never
lost; while the store is unavailable the answer is 503 (send it again). The first outcome of a
kind counts `mirrorgate_operations_total{route,arm,outcome}`; the first `completed` observes the
operation's summed cost in `mirrorgate_operation_cost_usd{route,arm}`.
"""

from __future__ import annotations

import asyncio
import math
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from proxy.core import (
    CLIENT_ARMS,
    ExchangeRecord,
    NotFound,
    OperationCall,
    OperationSummary,
    OutcomeRecord,
    RequestError,
    merged_calls,
    operation_call,
    operation_id_problem,
    summarize,
)
from proxy.observability import GatewayMetrics
from proxy.store import OutcomeStore, StoreUnavailableError

from .admin import require_admin
from .errors import store_unavailable
from .feedback_auth import FeedbackAuth, FeedbackAuthError
from .post_intake import PostIntake
from .token_buckets import TokenBuckets

MAX_OUTCOME_BYTES = 64 * 1024
MAX_LABELS = 20
MAX_LABEL_NAME_CHARS = 64
MAX_LABEL_VALUE_CHARS = 256
MAX_SIGNED_REQUESTS = 1000
"""A signed token is checked against an operation's newest requests, at most this many."""
_SEND_AGAIN = "the store is unavailable; send the outcome again"
_FLAGS = ("completed", "adopted", "corrected")


class OutcomeBody(BaseModel):
    """The request body (unknown fields are refused)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    operation_id: str
    completed: bool | None = None
    adopted: bool | None = None
    corrected: bool | None = None
    value: float | None = None
    labels: dict[str, str] | None = Field(None, min_length=1, max_length=MAX_LABELS)
    user: str | None = Field(None, min_length=1, max_length=200)
    """The end user an application token posts for (refines the caller; ignored otherwise)."""

    @field_validator("operation_id")
    @classmethod
    def _an_operation_id(cls, value: str) -> str:
        problem = operation_id_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("value")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    @field_validator("labels")
    @classmethod
    def _bounded_labels(cls, labels: dict[str, str] | None) -> dict[str, str] | None:
        for name, text in (labels or {}).items():
            if not 1 <= len(name) <= MAX_LABEL_NAME_CHARS or not name.isprintable():
                raise ValueError(
                    f"label names are 1 to {MAX_LABEL_NAME_CHARS} printable characters"
                )
            if len(text) > MAX_LABEL_VALUE_CHARS:
                raise ValueError(f"label '{name}' is longer than {MAX_LABEL_VALUE_CHARS}")
        return labels

    @model_validator(mode="after")
    def _something_to_say(self) -> OutcomeBody:
        if all(getattr(self, k) is None for k in (*_FLAGS, "value", "labels")):
            raise ValueError("give at least one of completed, adopted, corrected, value, labels")
        return self

    def records(self, caller: str, route: str | None, now: datetime) -> list[OutcomeRecord]:
        """One record per kind the body says."""
        base: dict[str, Any] = {
            "operation_id": self.operation_id, "caller": caller, "created_at": now,
            "route": route,
        }  # fmt: skip
        records = [
            OutcomeRecord(**base, kind=kind, flag=getattr(self, kind))
            for kind in _FLAGS
            if getattr(self, kind) is not None
        ]
        if self.value is not None:
            records.append(OutcomeRecord(**base, kind="value", value=self.value))
        if self.labels is not None:
            labels = tuple(sorted(self.labels.items()))
            records.append(OutcomeRecord(**base, kind="labels", labels=labels))
        return records


class RecentOperations:
    """The calls of recent operations, so an outcome that arrives before the recorder wrote its
    operation's exchanges still joins, and their cost counts. A record sink (the client path's,
    the shadows', the probes' and the judge's); bounded: operations forgotten oldest first, and
    at most `calls_per_operation` calls kept of each (the store has the rest)."""

    def __init__(self, size: int = 20_000, calls_per_operation: int = 256) -> None:
        self.size = size
        self.calls_per_operation = calls_per_operation
        self._calls: OrderedDict[str, list[OperationCall]] = OrderedDict()

    def __call__(self, record: object) -> None:
        if not isinstance(record, ExchangeRecord) or record.operation_id is None:
            return
        calls = self._calls.get(record.operation_id)
        if calls is None:
            calls = self._calls[record.operation_id] = []
            if len(self._calls) > self.size:
                self._calls.popitem(last=False)
        if len(calls) < self.calls_per_operation:
            calls.append(operation_call(record))

    def calls(self, operation_id: str) -> list[OperationCall]:
        return list(self._calls.get(operation_id, ()))


class OutcomeService:
    """Validates, joins, stores and counts outcomes; sums operations up."""

    def __init__(
        self,
        outcomes: OutcomeStore,
        recent: RecentOperations,
        metrics: GatewayMetrics,
        auth: FeedbackAuth,
        buckets: TokenBuckets,
    ) -> None:
        self.outcomes = outcomes
        self.recent = recent
        self.metrics = metrics
        self.auth = auth
        self.intake = PostIntake(
            auth,
            buckets,
            lambda reason: metrics.outcomes_rejected.labels(reason).inc(),
            noun="the outcome",
            max_bytes=MAX_OUTCOME_BYTES,
        )

    async def handle(self, request: Request) -> JSONResponse:
        """The answer to one `POST /v1/outcomes`: 201 and what was recorded. Raises
        `GatewayError`s (and `Unavailable` while the store cannot be reached)."""
        credential = self.intake.admit(request)
        body = await self.intake.body(request, OutcomeBody)
        calls = await self._calls(body.operation_id)
        client = [c for c in reversed(calls) if c.arm in CLIENT_ARMS]
        if credential.signed_token is not None:
            requests = list(dict.fromkeys(c.request_id for c in client))[:MAX_SIGNED_REQUESTS]
            try:
                self.auth.check_signed_for_any(credential, requests)
            except FeedbackAuthError as exc:
                self.intake.rejected(exc.reason)
                raise
        if not client:
            raise NotFound(f"no exchange of operation '{body.operation_id}'")
        summary = summarize(body.operation_id, calls)
        caller = credential.caller_of(body.user)
        recorded: list[str] = []
        duplicates: list[str] = []
        for record in body.records(caller, summary.route, datetime.now(UTC)):
            try:
                new = await asyncio.to_thread(self.outcomes.add, record)
            except StoreUnavailableError as exc:
                raise store_unavailable(exc, _SEND_AGAIN) from exc
            (recorded if new else duplicates).append(record.kind)
            if new:
                self._count(summary, record)
        answer = {"operation_id": body.operation_id, "recorded": recorded, "duplicates": duplicates}
        return JSONResponse(answer, status_code=201)

    def _count(self, summary: OperationSummary, record: OutcomeRecord) -> None:
        if record.kind not in _FLAGS or summary.route is None or summary.arm is None:
            return
        outcome = record.kind if record.flag else f"not_{record.kind}"
        self.metrics.operations.labels(summary.route, summary.arm, outcome).inc()
        if record.kind == "completed":
            self.metrics.operation_cost.labels(summary.route, summary.arm).observe(summary.cost_usd)

    async def summary(self, operation_id: str) -> OperationSummary | None:
        """The operation's summary from the store and the recent calls; None: unknown."""
        problem = operation_id_problem(operation_id)
        if problem is not None:
            raise RequestError(f"the operation id {problem}")
        calls = await self._calls(operation_id)
        try:
            outcomes = await asyncio.to_thread(self.outcomes.outcomes, operation_id)
        except StoreUnavailableError as exc:
            raise store_unavailable(exc, "the store is unavailable; ask again") from exc
        if not calls and not outcomes:
            return None
        return summarize(operation_id, calls, outcomes)

    async def _calls(self, operation_id: str) -> list[OperationCall]:
        """The operation's calls the store holds and those still on their way to it."""
        try:
            stored = await asyncio.to_thread(self.outcomes.calls, operation_id)
        except StoreUnavailableError as exc:
            raise store_unavailable(exc, _SEND_AGAIN) from exc
        return merged_calls(stored, self.recent.calls(operation_id))


def summary_json(summary: OperationSummary) -> dict[str, Any]:
    """An operation's summary as `GET /admin/operations/{id}` answers it."""

    def moment(at: datetime | None) -> str | None:
        return at.isoformat() if at is not None else None

    return {
        "operation_id": summary.operation_id,
        "route": summary.route,
        "routes": list(summary.routes),
        "arm": summary.arm,
        "arms": list(summary.arms),
        "requests": summary.requests,
        "calls": summary.calls,
        "fallbacks": summary.fallbacks,
        "errors": summary.errors,
        "judge_calls": summary.judge_calls,
        "cost_usd": summary.cost_usd,
        "client_cost_usd": summary.client_cost_usd,
        "judge_cost_usd": summary.judge_cost_usd,
        "off_path": {
            "shadow_calls": summary.shadow_calls,
            "shadow_cost_usd": summary.shadow_cost_usd,
            "probe_calls": summary.probe_calls,
            "probe_cost_usd": summary.probe_cost_usd,
        },
        "started_at": moment(summary.started_at),
        "ended_at": moment(summary.ended_at),
        "latency_s": summary.latency_s,
        "outcomes": {
            o.kind: {
                "flag": o.flag,
                "value": o.value,
                "labels": dict(o.labels) or None,
                "caller": o.caller,
                "created_at": moment(o.created_at),
            }
            for o in summary.outcomes
        },
    }


def outcome_service(request: Request) -> OutcomeService:
    """The outcome service of the gateway serving `request`: `app.state.outcome_service`, set
    by the app's wiring."""
    service: OutcomeService = request.app.state.outcome_service
    return service


# `POST /v1/outcomes` and `GET /admin/operations/{id}` (admin token); built once per process,
# like every API router (proxy/api/admin.py says why).
outcome_router = APIRouter()


@outcome_router.post("/v1/outcomes")
async def outcomes(request: Request) -> JSONResponse:
    return await outcome_service(request).handle(request)


@outcome_router.get("/admin/operations/{operation_id:path}", dependencies=[Depends(require_admin)])
async def operation(operation_id: str, request: Request) -> JSONResponse:
    summary = await outcome_service(request).summary(operation_id)
    if summary is None:
        raise NotFound(f"no exchange or outcome of operation '{operation_id[:128]}'")
    return JSONResponse(summary_json(summary))
