"""Shadow traffic: copies of live requests sent to candidate models off the client path.

For each client request the exchange handler calls `ShadowDispatcher.offer` once, before calling
the primary. Every configured shadow of the route, and the noise-floor copy to the primary itself,
is decided there without waiting on anything:

- sampled or not, deterministically: a hash of the sticky key (when the route's canary has one and
  the request carries it) or of the request id, per candidate, below `sample`;
- dropped, and counted in `mirrorgate_shadow_dropped_total{reason}`, when the client opted out
  (`x-mirrorgate-shadow: off` → `opted_out`), the gateway's event loop has no CPU to spare
  (`overload`, see `overload.py`), the candidate already has `max_concurrency` calls in flight
  (`concurrency`), the candidate spent `max_usd_per_hour` in the last hour (`budget`), every
  shadow slot of the gateway is taken (`queue_full`), or the gateway is stopping (`shutdown`);
- otherwise started as a background task that calls the candidate (streaming when the primary
  streams, so its time to first token is real), waits for the primary's answer, and records the
  candidate's exchange (`arm="shadow"`) and a `PairRecord` comparing the two, with its verdict
  under the route's agreement settings (`proxy.core.judge_pair`) — the one verdict that
  `mirrorgate_agreement_total`, the judge and the report all read.

The client never waits for any of it: `offer` is synchronous and O(shadows), and the tasks only
ever read what the client path already finished. Shadows are strictly best-effort: while the
loop is overloaded they are not started at all, so the CPU goes to client requests.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from opentelemetry.trace import SpanContext
from prometheus_client import Counter

from analyzers.agreement import AgreementSpec
from analyzers.answer import Answer
from analyzers.comparison import TextComparison, compare_text
from proxy.config import ShadowSpec, agreement_spec
from proxy.core import (
    Agreement,
    Arm,
    ExchangeRecord,
    HourlySpend,
    PairRecord,
    RecordSink,
    Status,
    TaskSet,
    judge_pair,
    sampled,
    sticky_key,
)
from proxy.gateway import ExchangeObserver, FinishedExchange, RoutePlan, RouteState
from proxy.observability import ExchangeTracer, GatewayMetrics
from proxy.upstream import Attempt, CallContext, ModelCaller

from .analysis import AnalysisWorker, answer_of
from .calls import call_within, emit, http_status
from .llm_judge import Judge
from .overload import LoopLoadMonitor

log = logging.getLogger("mirrorgate.shadow")

OPT_OUT_HEADER = b"x-mirrorgate-shadow"
PRIMARY_WAIT_S = 600.0
"""The longest a finished shadow waits for its primary's answer before giving up on the pair."""


def _sampling_key(route: RouteState, ctx: CallContext) -> str:
    """The canary's sticky key when the route has one and the request carries it (the same key
    canary routing uses), else the request id."""
    canary = route.spec.canary
    key = sticky_key(canary.sticky, ctx.headers, ctx.payload) if canary is not None else None
    return key if key is not None else ctx.request_id


@dataclass(slots=True)
class PrimaryAnswer:
    """What a shadow compares itself with; resolved when the client path's final record is built."""

    future: asyncio.Future[tuple[ExchangeRecord, str, SpanContext | None]]


@dataclass(frozen=True, slots=True)
class _Job:
    target: str
    kind: str
    """`shadow` (a candidate) or `noise` (the primary itself, asked again)."""
    spec: ShadowSpec | None
    """The candidate's limits; None for the noise floor (default concurrency, no budget)."""

    @property
    def timeout_s(self) -> float | None:
        return self.spec.timeout_s if self.spec is not None else None


class ShadowDispatcher(ExchangeObserver):
    """Decides and runs every shadow call of the gateway (see the module docstring). An observer
    of the client path: a planned primary request starts its shadows, its final answer is what
    they are compared with."""

    def __init__(
        self,
        caller: ModelCaller,
        metrics: GatewayMetrics,
        tracer: ExchangeTracer,
        sinks: Sequence[RecordSink],
        *,
        analysis: AnalysisWorker | None = None,
        judge: Judge | None = None,
        max_pending: int = 1000,
        clock: Callable[[], float] = time.monotonic,
        shed_lag_s: float = 0.0,
        shed_busy: float = 0.0,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self.caller = caller
        self.metrics = metrics
        self.tracer = tracer
        self.sinks = tuple(sinks)
        self.max_pending = max_pending
        self.clock = clock
        self.tasks = TaskSet("shadow")
        self.inflight: dict[str, int] = {}
        self.spend: dict[str, HourlySpend] = {}
        self.accepting = True
        self.overload = (
            LoopLoadMonitor(shed_lag_s, shed_busy, cpu_clock=cpu_clock)
            if shed_lag_s > 0 or shed_busy > 0
            else None
        )
        """Says when the event loop has no CPU to spare (None: never shed for overload)."""
        if self.overload is not None:
            monitor = self.overload
            metrics.loop_lag.set_function(lambda: monitor.lag_s)
            metrics.loop_busy.set_function(lambda: monitor.busy)
            metrics.shadow_overloaded.set_function(lambda: float(monitor.overloaded))
        self._agreements: dict[str, AgreementSpec] = {}
        self._counters: dict[tuple[Counter, str, str, str], Counter] = {}
        self.analysis = analysis
        """Shadows' answers are analysed like the primary's (None: no rule checks, no plugins)."""
        self.judge = judge
        """Scores candidate against primary when `judge:` is configured."""
        self._waiting: dict[str, PrimaryAnswer] = {}
        """Requests whose shadows wait for the primary's answer, by request id."""

    # --- on the client path -----------------------------------------------------------------------

    def request_planned(self, ctx: CallContext, plan: RoutePlan) -> None:
        # Shadows compare with the production model: a canary's answer is no baseline, nor an
        # experiment arm's, unless it is the production model's own answer (its control, served
        # by the primary with the client's prompt): shadows keep working through an experiment.
        baseline = plan.arm is Arm.PRIMARY or (
            plan.arm is Arm.EXPERIMENT
            and plan.target == plan.route.primary
            and plan.system_append is None
        )
        if baseline:
            answer = self.offer(ctx, plan.route)
            if answer is not None:
                self._waiting[ctx.request_id] = answer

    def exchange_finished(self, done: FinishedExchange) -> None:
        if done.final:
            answer = self._waiting.pop(done.ctx.request_id, None)
            if answer is not None and not answer.future.done():
                answer.future.set_result((done.record, done.text, done.span))

    def request_closed(self, ctx: CallContext) -> None:
        answer = self._waiting.pop(ctx.request_id, None)
        if answer is not None and not answer.future.done():
            answer.future.cancel()  # no primary answer to compare with

    def offer(self, ctx: CallContext, route: RouteState) -> PrimaryAnswer | None:
        """Start the shadow calls this request gets; return the handle to give the primary's
        answer to (None when no shadow runs). Never blocks."""
        jobs = self._jobs(ctx, route)
        if not jobs:
            return None
        opted_out = any(
            key == OPT_OUT_HEADER and value.strip().lower() in (b"off", b"false", b"0")
            for key, value in ctx.headers
        )
        answer: PrimaryAnswer | None = None
        now = self.clock()
        for job in jobs:
            reason = self._refusal(job, now, opted_out)
            if reason is not None:
                self._count(self.metrics.shadow_dropped, route.name, job.target, reason)
                continue
            if answer is None:
                answer = PrimaryAnswer(asyncio.get_running_loop().create_future())
            self.inflight[job.target] = self.inflight.get(job.target, 0) + 1
            self.tasks.spawn(self._run(ctx, route, job, answer), f"{job.kind}:{job.target}")
        return answer

    def _jobs(self, ctx: CallContext, route: RouteState) -> list[_Job]:
        jobs: list[_Job] = []
        key: str | None = None
        for shadow in route.spec.shadows:
            key = key or _sampling_key(route, ctx)
            if sampled(key, shadow.model, shadow.sample):
                jobs.append(_Job(shadow.model, "shadow", shadow))
        noise = route.spec.noise_sample
        if noise > 0 and sampled(ctx.request_id, "\x00noise", noise):
            jobs.append(_Job(route.primary, "noise", None))
        return jobs

    def _refusal(self, job: _Job, now: float, opted_out: bool) -> str | None:
        if not self.accepting:
            return "shutdown"
        if opted_out:
            return "opted_out"
        if self.overload is not None and self.overload.overloaded:
            return "overload"
        spec = job.spec
        limit = spec.max_concurrency if spec is not None else 8
        if self.inflight.get(job.target, 0) >= limit:
            return "concurrency"
        if spec is not None and spec.max_usd_per_hour is not None:
            spend = self.spend.get(job.target)
            if spend is not None and spend.last_hour(now) >= spec.max_usd_per_hour:
                return "budget"
        if len(self.tasks) >= self.max_pending:
            return "queue_full"
        return None

    def _count(self, family: Counter, route: str, target: str, value: str) -> None:
        """Add one to `family{route, target, <reason or result>}`; the label children are cached
        (`labels()` is not free, and a shed offer must stay cheap)."""
        key = (family, route, target, value)
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = family.labels(route, target, value)
        counter.inc()

    # --- off the client path ----------------------------------------------------------------------

    async def _run(
        self, ctx: CallContext, route: RouteState, job: _Job, answer: PrimaryAnswer
    ) -> None:
        pair_id = _pair_id(ctx.request_id, job.kind, job.target)
        tags = (job.kind,) if job.kind == "noise" else ()
        # The client path's context as it is, when it already carries the right tags: a shadow
        # only reads it (the payload's `model` is set and serialised within one call to `open`).
        shadow_ctx = ctx if ctx.tags == tags else replace(ctx, tags=tags)
        try:
            attempt = await self._call(shadow_ctx, job)
        except asyncio.CancelledError:
            self._count(self.metrics.shadow_dropped, route.name, job.target, "shutdown")
            raise
        finally:
            self.inflight[job.target] -= 1
        attempt.pair_id = pair_id
        ended = time.perf_counter()
        record = self.caller.record(
            shadow_ctx, attempt, http_status(attempt), ended, own_clock=True
        )
        spend = self.spend.get(job.target)
        if spend is None:
            spend = self.spend[job.target] = HourlySpend()
        spend.add(self.clock(), record.cost_usd)
        self.metrics.observe(record)
        text = self.caller.answer_text(shadow_ctx, attempt)
        primary, primary_text, span = await _primary_answer(answer, pair_id, ctx.request_id)
        if self.tracer.enabled:
            self.tracer.record(
                record, attempt.start_ns, ctx.endpoint.operation, links=[span] if span else ()
            )
        self._emit(record)
        candidate_answer = None
        if self.analysis is not None:
            candidate_answer = answer_of(ctx.endpoint.name, text, attempt.parsed)
            self.analysis.submit(record, candidate_answer)
        if primary is not None:
            comparison = compare_text(primary_text, text)
            both_ok = primary.status is Status.OK and record.status is Status.OK
            verdict = judge_pair(
                primary_text, text, self._agreement(route), both_ok=both_ok, comparison=comparison
            )
            self._emit(_pair(pair_id, job.kind, primary, record, comparison, verdict))
            if verdict is not Agreement.NOT_APPLICABLE:
                self._count(self.metrics.agreement, route.name, job.target, verdict.value)
            if self.analysis is not None and candidate_answer is not None:
                self.analysis.submit_pair(
                    primary, Answer(text=primary_text), record, candidate_answer, job.kind
                )
            if self.judge is not None and job.kind == "shadow":
                self.judge.offer(ctx.payload, primary, primary_text, record, text)

    async def _call(self, ctx: CallContext, job: _Job) -> Attempt:
        """Call the candidate (reading a stream to its end) within the shadow's `timeout_s`."""
        return await call_within(
            self.caller, ctx, job.target, Arm.SHADOW, job.timeout_s, what="shadow"
        )

    def _agreement(self, route: RouteState) -> AgreementSpec:
        spec = self._agreements.get(route.name)
        if spec is None:
            spec = self._agreements[route.name] = agreement_spec(route.spec.agreement)
        return spec

    def _emit(self, item: ExchangeRecord | PairRecord) -> None:
        emit(self.sinks, item)

    def start(self) -> None:
        """Start the overload monitor (from the gateway's lifespan, on the serving loop)."""
        if self.overload is not None:
            self.overload.start()

    async def stop(self, timeout_s: float) -> None:
        """Refuse new shadows, give running ones `timeout_s`, then cancel the rest (counted)."""
        self.accepting = False
        if self.overload is not None:
            await self.overload.stop()
        await self.tasks.wait(timeout_s)
        cancelled = await self.tasks.cancel_all()
        if self.judge is not None:
            await self.judge.stop(timeout_s)
        if cancelled:
            log.info("shadow: %d calls still running at shutdown were cancelled", cancelled)


def _pair_id(request_id: str, kind: str, target: str) -> str:
    """The pair's id: unique per (request, kind, target), 32 hex digits like a uuid4's.

    Derived rather than drawn: `uuid4` reads the OS's random source, and `os.urandom` releases
    the GIL, so the event loop can wait for the recorder thread to give it back (up to the 5 ms
    switch interval) once per shadow call.
    """
    key = f"{request_id}\x00{kind}\x00{target}".encode()
    return hashlib.blake2b(key, digest_size=16).hexdigest()


async def _primary_answer(
    answer: PrimaryAnswer, pair_id: str, request_id: str
) -> tuple[ExchangeRecord | None, str, SpanContext | None]:
    """The primary's record, answer text and span, once the client path has them; (None, "",
    None) when it ends without one, or after `PRIMARY_WAIT_S`."""
    future = answer.future
    if not future.done():  # usually it is: a shadow seldom answers before the primary
        try:
            await asyncio.wait_for(asyncio.shield(future), PRIMARY_WAIT_S)
        except TimeoutError:
            log.warning("shadow %s: no primary answer for %s; pair skipped", pair_id, request_id)
            return None, "", None
        except asyncio.CancelledError:
            if not future.cancelled():
                raise  # this task is being cancelled (shutdown)
    if future.cancelled():
        return None, "", None
    primary, text, span = future.result()
    return primary, text, span


def _pair(
    pair_id: str,
    kind: str,
    primary: ExchangeRecord,
    candidate: ExchangeRecord,
    comparison: TextComparison,
    verdict: Agreement,
) -> PairRecord:
    ttft = (
        candidate.ttft_s - primary.ttft_s
        if candidate.ttft_s is not None and primary.ttft_s is not None
        else None
    )
    return PairRecord(
        pair_id=pair_id,
        kind=kind,
        request_id=primary.request_id,
        route=primary.route,
        primary_target=primary.target,
        candidate_target=candidate.target,
        created_at=datetime.now(UTC),
        primary_status=primary.status.value,
        candidate_status=candidate.status.value,
        exact_equal=comparison.exact,
        normalized_equal=comparison.normalized,
        json_equal=comparison.json_equal,
        json_fields=tuple(sorted(comparison.json_fields.items())),
        length_ratio=comparison.length_ratio,
        latency_delta_s=candidate.duration_s - primary.duration_s,
        ttft_delta_s=ttft,
        cost_delta_usd=candidate.cost_usd - primary.cost_usd,
        agreement=verdict.value,
        sticky_unit=primary.sticky_unit,
    )
