"""Sending replay jobs to candidate models: bounded concurrency, budgets, clean stops.

`ReplayRunner.run` hands the jobs, in order, to `concurrency` workers. Each worker sends one job
at a time the way a shadow is sent — the body as recorded, `model` rewritten to the candidate's
upstream model, a stream read to its end so the time to first token is real — then builds the
candidate's record (`arm=shadow`, the job's tags) and, when there is something to compare with, a
`PairRecord` linked to it by `pair_id`, with its verdict under the job's route's agreement settings
(`proxy.core.judge_pair`, as for live shadows; none for a route not in the config). Both are
written together by the `ResultWriter`.

Budget: before a job is sent, its candidate's spend so far is checked against its limit; once
reached, the candidate's remaining jobs are counted as `over_budget` and not sent. Calls already in
flight still finish, so the spend can pass the limit by at most what `concurrency` calls cost.

Stopping (`stop`, from a signal handler): the first call stops dispatching and lets calls in flight
finish and be stored; a second call cancels them (their answers are not stored, so a rerun sends
them again). Jobs never dispatched are counted as `not_sent`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from analyzers.agreement import AgreementSpec
from analyzers.comparison import compare_text
from proxy.core import Arm, ExchangeRecord, PairRecord, RequestError, Status, judge_pair
from proxy.store import StoreError, redact
from proxy.upstream import CallContext, ModelCaller

from .job import ReplayJob
from .progress import ProgressBar
from .writer import ResultWriter

_HEADERS = [(b"content-type", b"application/json")]


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """What came of one job that was sent (or could not be)."""

    job: ReplayJob
    record: ExchangeRecord | None
    """The candidate's exchange; None when the request could not be sent at all."""
    pair: PairRecord | None
    """The comparison with the job's reference; None without a reference or a record."""
    failure: str | None = None
    """Why the request could not be sent (when `record` is None)."""

    @property
    def ok(self) -> bool:
        return self.record is not None and self.record.status is Status.OK


class Budget:
    """USD spent per candidate in this run, against an optional limit per candidate."""

    def __init__(self, limits: Mapping[str, float | None]) -> None:
        self.limits = dict(limits)
        self.spent: dict[str, float] = dict.fromkeys(self.limits, 0.0)

    def allows(self, candidate: str) -> bool:
        """True while `candidate` may be sent another request."""
        limit = self.limits.get(candidate)
        return limit is None or self.spent.get(candidate, 0.0) < limit

    def charge(self, candidate: str, usd: float) -> None:
        self.spent[candidate] = self.spent.get(candidate, 0.0) + usd


@dataclass(slots=True)
class RunResult:
    """Everything a run did, for the summary."""

    outcomes: list[JobOutcome] = field(default_factory=list)
    over_budget: Counter[str] = field(default_factory=Counter)
    """Jobs not sent, per candidate, because its budget was spent."""
    not_sent: Counter[str] = field(default_factory=Counter)
    """Jobs never dispatched, per candidate, because the run was stopped."""
    abandoned: Counter[str] = field(default_factory=Counter)
    """Calls cancelled in flight (a second stop), per candidate; their answers are not stored."""
    stopped_by: str | None = None
    """Why the run stopped early (e.g. `SIGINT`, or a store failure); None if it ran to the end."""
    store_error: str | None = None
    """The first store failure, if any; the records of that batch were not stored."""


class ReplayRunner:
    """Runs jobs against candidates; see the module docstring."""

    def __init__(
        self,
        caller: ModelCaller,
        writer: ResultWriter,
        budget: Budget,
        *,
        concurrency: int,
        progress: ProgressBar | None = None,
        on_result: Callable[[JobOutcome], None] | None = None,
        agreements: Mapping[str, AgreementSpec] | None = None,
    ) -> None:
        """`agreements`: each route's agreement settings, by route name."""
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self._caller = caller
        self._writer = writer
        self._budget = budget
        self._concurrency = concurrency
        self._progress = progress
        self._on_result = on_result  # after each job's results are queued (tests stop runs so)
        self._agreements = dict(agreements or {})
        self._jobs: Iterator[ReplayJob] = iter(())
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self.result = RunResult()

    @property
    def stopping(self) -> bool:
        """True once `stop` was called (or the store failed): nothing more is dispatched."""
        return self._stopping

    def stop(self, reason: str) -> None:
        """Stop dispatching; the second call also cancels the calls in flight."""
        if self._stopping:
            for task in self._tasks:
                task.cancel()
            return
        self._stopping = True
        self.result.stopped_by = self.result.stopped_by or reason

    async def run(self, jobs: Sequence[ReplayJob]) -> RunResult:
        """Send every job (unless stopped) and return what happened."""
        self._jobs = iter(jobs)
        try:
            async with asyncio.TaskGroup() as group:
                self._tasks = [
                    group.create_task(self._worker(), name=f"replay-worker-{i}")
                    for i in range(min(self._concurrency, len(jobs)))
                ]
        finally:
            for job in self._jobs:
                self.result.not_sent[job.candidate] += 1
            try:
                await self._writer.flush()
            except StoreError as exc:
                self._store_failed(exc)
        return self.result

    async def _worker(self) -> None:
        while True:
            # Let callbacks already scheduled (a signal's stop) run before the next dispatch.
            await asyncio.sleep(0)
            if self._stopping:
                return
            job = next(self._jobs, None)
            if job is None:
                return
            if not self._budget.allows(job.candidate):
                self.result.over_budget[job.candidate] += 1
                self._advance()
                continue
            try:
                outcome = await self._send(job)
            except asyncio.CancelledError:
                self.result.abandoned[job.candidate] += 1
                raise
            if outcome.record is not None:
                self._budget.charge(job.candidate, outcome.record.cost_usd)
            self.result.outcomes.append(outcome)
            stored = [r for r in (outcome.record, outcome.pair) if r is not None]
            try:
                await self._writer.add(stored)
            except StoreError as exc:
                self._store_failed(exc)
            self._advance()
            if self._on_result is not None:
                self._on_result(outcome)

    def _advance(self) -> None:
        if self._progress is not None:
            self._progress.advance()

    def _store_failed(self, exc: StoreError) -> None:
        if self.result.store_error is None:
            self.result.store_error = str(exc)
        if not self._stopping:  # a second stop() would abandon the calls in flight
            self.stop("store failure")

    async def _send(self, job: ReplayJob) -> JobOutcome:
        ctx = CallContext(
            request_id=job.request_id,
            route=job.route,
            endpoint=job.endpoint,
            payload=request_payload(job),
            stream=job.stream,
            strip_usage=False,
            headers=_HEADERS,
            tags=job.tags,
        )
        try:
            attempt = await self._caller.open(ctx, job.candidate, Arm.SHADOW)
        except RequestError as exc:
            return JobOutcome(job, None, None, failure=exc.message)
        if job.reference is not None:
            attempt.pair_id = uuid.uuid4().hex
        if attempt.streaming:
            await self._caller.consume(ctx, attempt)
        http_status = attempt.response.status_code if attempt.response is not None else 0
        record = self._caller.record(ctx, attempt, http_status, time.perf_counter(), own_clock=True)
        record = dataclasses.replace(record, rule=job.rule, rule_version=job.rule_version)
        return JobOutcome(job, record, pair_for(job, record, self._agreements.get(job.route)))


def request_payload(job: ReplayJob) -> dict[str, Any]:
    """The body to send: the job's, plus a request for the usage report of a stream when the
    endpoint only reports it on request (so cost is measured, not estimated)."""
    payload = dict(job.body)
    if job.stream and job.endpoint.usage_option:
        options = payload.get("stream_options")
        options = options if isinstance(options, dict) else {}
        if not options.get("include_usage"):
            payload["stream_options"] = {**options, "include_usage": True}
    return payload


def pair_for(
    job: ReplayJob, record: ExchangeRecord, agreement: AgreementSpec | None = None
) -> PairRecord | None:
    """The candidate's answer compared with the job's reference (None without one), with its
    verdict under `agreement` (the route's settings; None: no verdict)."""
    reference = job.reference
    if reference is None or record.pair_id is None:
        return None
    expected, answer = reference.text, record.response_text or ""
    if reference.masked:
        expected, answer = redact(expected), redact(answer)
    comparison = compare_text(expected, answer)
    verdict = None
    if agreement is not None:
        both_ok = reference.status == Status.OK.value and record.status is Status.OK
        verdict = judge_pair(expected, answer, agreement, both_ok=both_ok, comparison=comparison)
    ttft_delta = None
    if record.ttft_s is not None and reference.ttft_s is not None:
        ttft_delta = record.ttft_s - reference.ttft_s
    return PairRecord(
        pair_id=record.pair_id,
        kind=job.pair_kind,
        request_id=job.request_id,
        route=job.route,
        primary_target=reference.target,
        candidate_target=job.candidate,
        created_at=datetime.now(UTC),
        primary_status=reference.status,
        candidate_status=record.status.value,
        exact_equal=comparison.exact,
        normalized_equal=comparison.normalized,
        json_equal=comparison.json_equal,
        json_fields=tuple(comparison.json_fields.items()),
        length_ratio=comparison.length_ratio,
        latency_delta_s=(
            None if reference.duration_s is None else record.duration_s - reference.duration_s
        ),
        ttft_delta_s=ttft_delta,
        cost_delta_usd=None if reference.cost_usd is None else record.cost_usd - reference.cost_usd,
        agreement=None if verdict is None else verdict.value,
    )
