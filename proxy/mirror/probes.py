"""Rule-flip probes: live requests re-sent, off the client path, with the rule's value flipped.

A rule's `probes:` block (`rules.<r>.probes`) names where its value sits in the system prompt
(`parameter`, a regex with a named group `value`) and how a model that follows the prompt
answers (`expect`, checks in which `{value}` stands for the value asked). For each client
request the exchange plans, `ProbeDispatcher.request_planned` decides at once, without waiting
on anything:

- whether the request is probed: it carries a rule version of a rule with probes, it is served
  by the route's primary or its canary (not by a rolled-back route's fallback), it is in the
  rule's `sample` (deterministic: a hash of the request id), and the `parameter` matches one of
  its system prompt texts;
- the value asked (`analyzers.rule_flip.flip_value`: one of `values` other than the original,
  chosen by the request id, or `original * scale + offset`) and the probe's body: the client's
  body with only the matched value's span replaced (`rewrite_system_prompt`); nothing the client
  path holds is mutated;
- per target (`probes.targets`, else the route's primary, shadows and canary), whether the call
  is dropped, counted in `mirrorgate_probe_dropped_total{route,target,reason}`: `shutdown` (the
  gateway is stopping), `opted_out` (`x-mirrorgate-shadow: off` opts a request out of shadows and
  probes alike), `no_value` (no value differs from the original), `overload` (the event loop has
  no CPU to spare: the shadows' monitor, see `overload.py`), `concurrency` (`max_concurrency`
  probes of the rule in flight to the target), `budget` (`max_usd_per_hour` spent in the last
  hour), `rate` (`max_per_hour` probes started in the last hour) or `queue_full` (the gateway's
  `max_pending` probe tasks are running).

The hourly caps are the **fleet's**, not one process's: with a store to read (`fleet`), every
`FLEET_REFRESH_S` the dispatcher reads the last hour's scored probes and their cost per (rule,
target) from the store every replica writes to, and a cap is reached when either this process's
own count or the fleet's (as last read, plus what this process started since) reaches it. Warm-up
traffic before a rollout, and other replicas, spend the same budget the rollout's
`rule_adaptation` waits on; the judge says until when (`proxy.rollout.probe_budget`).

Each probe that is not dropped runs as a background task: it calls the target through the
`ModelCaller` as the client's request was made (streamed when the client streamed, so the body
differs from the client's in the value only), within `probes.timeout_s` (else the model's own
timeouts), and records the call as an `ExchangeRecord` of arm `probe` (tag `probe`, `pair_id` =
the probe's id). An answered call is scored and recorded as a `ProbeRecord`, and counted in
`mirrorgate_probe_results_total{route,target,rule,result}`:

- `followed`: the answer passes every `expect` check for the value asked;
- `stuck`: it does not, but passes every one for the original value (the old rule);
- `other`: neither.

A failed call is not scored; its exchange record says why. Probe answers are not handed to the
analysis worker: they answer a rule value that no live request carries, and their checks would
count against the live version's pass rates.

The client never waits for a probe and its answer never depends on one: `request_planned` is
synchronous (for a sampled request, one search of `parameter` in the system prompt and a copy of
the text it rewrites, then O(targets)), and a probe only reads what the client path holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import Counter

from analyzers import Answer, Check
from analyzers.checks import compile_check, run_checks
from analyzers.rule_flip import answered_value, expect_for, flip_value, rewrite_system_prompt
from proxy.config import MirrorgateConfig, ProbesSpec
from proxy.core import (
    Arm,
    ExchangeRecord,
    HourlySpend,
    ProbeRecord,
    RecordSink,
    Status,
    TaskSet,
    sampled,
)
from proxy.gateway import ExchangeObserver, RoutePlan, RouteState
from proxy.observability import ExchangeTracer, GatewayMetrics
from proxy.store import ProbeStore
from proxy.upstream import Attempt, CallContext, ModelCaller

from .analysis import answer_of
from .calls import call_within, emit, http_status
from .overload import LoopLoadMonitor
from .shadow import OPT_OUT_HEADER

log = logging.getLogger("mirrorgate.probes")

PROBE_TAGS = ("probe",)
"""The tags of every probe call's exchange record."""
MAX_COMPILED = 256
"""Compiled `expect` lists kept, one per (rule, value): values generated with scale/offset
are as many as the originals, so the cache is bounded."""
FLEET_REFRESH_S = 5.0
"""How often the fleet's hourly probe spend is read from the store: a replica overshoots a
fleet cap by at most what it starts in this long (and the probes other replicas have in flight)."""
PROBED_ARMS = (Arm.PRIMARY, Arm.CANARY)
"""The client-path arms whose requests may be probed: the probe does not depend on which of
them served the client. A route served by its fallback (rolled back) is not probed."""


@dataclass(frozen=True, slots=True)
class _Rule:
    """One rule's probe settings, compiled once."""

    name: str
    spec: ProbesSpec
    pattern: re.Pattern[str]
    expect: tuple[dict[str, Any], ...]
    """The `expect` checks' fields, `{value}` still in them."""


@dataclass(frozen=True, slots=True)
class _Probe:
    """One probe decided on the client path: a target, the body and the values."""

    probe_id: str
    rule: _Rule
    target: str
    payload: dict[str, Any]
    original: str
    asked: str


class ProbeDispatcher(ExchangeObserver):
    """Decides and runs every rule-flip probe of the gateway (see the module docstring)."""

    def __init__(
        self,
        config: MirrorgateConfig,
        caller: ModelCaller,
        metrics: GatewayMetrics,
        tracer: ExchangeTracer,
        sinks: Sequence[RecordSink],
        *,
        overload: LoopLoadMonitor | None = None,
        max_pending: int = 1000,
        clock: Callable[[], float] = time.monotonic,
        fleet: ProbeStore | None = None,
        fleet_refresh_s: float = FLEET_REFRESH_S,
    ) -> None:
        """`overload`: the monitor the shadow dispatcher already runs (it starts and stops it),
        or one this dispatcher starts and stops itself when it is not running yet (`start`).
        `fleet`: the probe results every replica writes, read every `fleet_refresh_s` so that
        the hourly caps hold for the fleet (None: for this process only)."""
        self.caller = caller
        self.metrics = metrics
        self.tracer = tracer
        self.sinks = tuple(sinks)
        self.max_pending = max_pending
        self.clock = clock
        self.overload = overload
        self._owns_overload = False
        self.tasks = TaskSet("probe")
        self.accepting = True
        self.rules: dict[str, _Rule] = {}
        self._compiled: OrderedDict[tuple[str, str], list[Check]] = OrderedDict()
        self.configure(config)
        self.inflight: dict[tuple[str, str], int] = {}
        """Probes in flight, by (rule, target)."""
        self.spend: dict[tuple[str, str], HourlySpend] = {}
        """USD spent in the last hour, by (rule, target)."""
        self.started: dict[tuple[str, str], HourlySpend] = {}
        """Probes started in the last hour, by (rule, target) (one "dollar" each)."""
        self._counters: dict[tuple[Counter, tuple[str, ...]], Counter] = {}
        self.fleet = fleet
        self.fleet_refresh_s = fleet_refresh_s
        self.fleet_seen: dict[tuple[str, str], tuple[int, float]] = {}
        """(probes, USD) of the last hour by (rule, target), every replica's, as last read."""
        self.since_read: dict[tuple[str, str], list[float]] = {}
        """[probes started, USD spent] by this process since that read, by (rule, target)."""
        self._follower = TaskSet("probe-fleet")
        self._stopping: asyncio.Event | None = None
        """Set by `stop`: ends the fleet reader's wait between reads (made on the serving loop)."""

    def configure(self, config: MirrorgateConfig) -> None:
        """Take the rules' probe settings from `config` (at start, and on a reload). Probes in
        flight finish under the settings they started with; the hourly rate and spend of each
        (rule, target) carry over."""
        self.rules = {
            name: _Rule(
                name,
                rule.probes,
                re.compile(rule.probes.parameter),
                tuple(c.model_dump(by_alias=True, exclude_none=True) for c in rule.probes.expect),
            )
            for name, rule in config.rules.items()
            if rule.probes is not None
        }
        self._compiled.clear()

    # --- on the client path -----------------------------------------------------------------------

    def request_planned(self, ctx: CallContext, plan: RoutePlan) -> None:
        rule = self.rules.get(ctx.rule) if ctx.rule is not None else None
        if rule is None or ctx.rule_version is None or plan.arm not in PROBED_ARMS:
            return
        if not sampled(ctx.request_id, f"\x00probe:{rule.name}", rule.spec.sample):
            return
        targets = self.targets(rule, plan.route)
        opted_out = any(
            key == OPT_OUT_HEADER and value.strip().lower() in (b"off", b"false", b"0")
            for key, value in ctx.headers
        )
        if not self.accepting or opted_out:
            why = "shutdown" if not self.accepting else "opted_out"
            for target in targets:
                self._count(self.metrics.probe_dropped, ctx.route, target, why)
            return
        spec = rule.spec

        matched: list[str] = []

        def flip(original: str) -> str | None:
            matched.append(original)
            return flip_value(original, spec.values, spec.scale, spec.offset, ctx.request_id)

        flipped = rewrite_system_prompt(ctx.endpoint.name, ctx.payload, rule.pattern, flip)
        if flipped is None:
            # No match is no probe of this request; a match with nothing to flip it to is one.
            if matched:
                for target in targets:
                    self._count(self.metrics.probe_dropped, ctx.route, target, "no_value")
            return
        payload, original, asked = flipped
        now = self.clock()
        for target in targets:
            reason = self._refusal(rule, target, now)
            if reason is not None:
                self._count(self.metrics.probe_dropped, ctx.route, target, reason)
                continue
            key = (rule.name, target)
            self.inflight[key] = self.inflight.get(key, 0) + 1
            started = self.started.get(key)
            if started is None:
                started = self.started[key] = HourlySpend()
            started.add(now, 1.0)
            self.since_read.setdefault(key, [0.0, 0.0])[0] += 1
            probe = _Probe(probe_id(ctx.request_id, target), rule, target, payload, original, asked)
            self.tasks.spawn(self._run(ctx, probe), f"probe:{target}")

    def targets(self, rule: _Rule, route: RouteState) -> list[str]:
        """`probes.targets`, else the route's primary (the model serving now), its shadows'
        models and its canary model, each once."""
        if rule.spec.targets is not None:
            return list(dict.fromkeys(rule.spec.targets))
        spec = route.spec
        names = [route.primary, *(s.model for s in spec.shadows)]
        if spec.canary is not None:
            names.append(spec.canary.model)
        return list(dict.fromkeys(names))

    def _refusal(self, rule: _Rule, target: str, now: float) -> str | None:
        spec = rule.spec
        if self.overload is not None and self.overload.overloaded:
            return "overload"
        key = (rule.name, target)
        if self.inflight.get(key, 0) >= spec.max_concurrency:
            return "concurrency"
        seen = self.fleet_seen.get(key, (0, 0.0))
        mine = self.since_read.get(key, (0.0, 0.0))
        if spec.max_usd_per_hour is not None:
            spend = self.spend.get(key)
            if spend is not None and spend.last_hour(now) >= spec.max_usd_per_hour:
                return "budget"
            if seen[1] + mine[1] >= spec.max_usd_per_hour:
                return "budget"
        started = self.started.get(key)
        if started is not None and started.last_hour(now) >= spec.max_per_hour:
            return "rate"
        if seen[0] + mine[0] >= spec.max_per_hour:
            return "rate"
        if len(self.tasks) >= self.max_pending:
            return "queue_full"
        return None

    def _count(self, family: Counter, *labels: str) -> None:
        """Add one to `family{labels}`; the label children are cached (`labels()` is not free,
        and a dropped probe must stay cheap)."""
        key = (family, labels)
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = family.labels(*labels)
        counter.inc()

    # --- off the client path ----------------------------------------------------------------------

    async def _run(self, ctx: CallContext, probe: _Probe) -> None:
        key = (probe.rule.name, probe.target)
        # The probe's own context: its body (only `model` is set in it, per call) and tags; the
        # client's request id, route, rule and rule version.
        probe_ctx = replace(ctx, payload=probe.payload, tags=PROBE_TAGS)
        try:
            attempt = await self._call(probe_ctx, probe)
        except asyncio.CancelledError:
            self._count(self.metrics.probe_dropped, ctx.route, probe.target, "shutdown")
            raise
        finally:
            self.inflight[key] -= 1
        attempt.pair_id = probe.probe_id
        ended = time.perf_counter()
        record = self.caller.record(probe_ctx, attempt, http_status(attempt), ended, own_clock=True)
        spend = self.spend.get(key)
        if spend is None:
            spend = self.spend[key] = HourlySpend()
        spend.add(self.clock(), record.cost_usd)
        self.since_read.setdefault(key, [0.0, 0.0])[1] += record.cost_usd
        self.metrics.observe(record)
        if self.tracer.enabled:
            self.tracer.record(record, attempt.start_ns, ctx.endpoint.operation)
        self._emit(record)
        if record.status is not Status.OK:
            return  # not scored: the exchange record says why
        text = self.caller.answer_text(probe_ctx, attempt)
        answer = answer_of(ctx.endpoint.name, text, attempt.parsed)
        result = self.score(probe.rule, answer, probe.asked, probe.original)
        self._count(self.metrics.probe_results, ctx.route, probe.target, probe.rule.name, result)
        self._emit(
            ProbeRecord(
                probe_id=probe.probe_id,
                request_id=ctx.request_id,
                route=ctx.route,
                target=probe.target,
                rule=probe.rule.name,
                rule_version=ctx.rule_version or "",
                created_at=datetime.now(UTC),
                original_value=probe.original,
                asked_value=probe.asked,
                result=result,
                answered_value=answered_value(probe.rule.expect, text, probe.rule.pattern),
                cost_usd=record.cost_usd,
            )
        )

    def score(self, rule: _Rule, answer: Answer, asked: str, original: str) -> str:
        """`followed`, `stuck` or `other` (see the module docstring)."""
        if self._passes(rule, asked, answer):
            return "followed"
        if self._passes(rule, original, answer):
            return "stuck"
        return "other"

    def _passes(self, rule: _Rule, value: str, answer: Answer) -> bool:
        checks = self._checks(rule, value)
        return checks is not None and all(r.result == "pass" for r in run_checks(checks, answer))

    def _checks(self, rule: _Rule, value: str) -> list[Check] | None:
        """`expect` compiled for `value`, cached per (rule, value) up to `MAX_COMPILED`; None
        when it does not compile for this value (logged; the answer scores `other`)."""
        key = (rule.name, value)
        checks = self._compiled.get(key)
        if checks is not None:
            self._compiled.move_to_end(key)
            return checks
        try:
            checks = [compile_check(expect_for(fields, value)) for fields in rule.expect]
        except Exception:
            log.warning("probes of rule %s: expect does not compile for %r", rule.name, value)
            return None
        self._compiled[key] = checks
        if len(self._compiled) > MAX_COMPILED:
            self._compiled.popitem(last=False)
        return checks

    async def _call(self, ctx: CallContext, probe: _Probe) -> Attempt:
        """Call the target (reading a stream to its end) within the probe's `timeout_s`."""
        return await call_within(
            self.caller, ctx, probe.target, Arm.PROBE, probe.rule.spec.timeout_s, what="probe"
        )

    def _emit(self, item: ExchangeRecord | ProbeRecord) -> None:
        emit(self.sinks, item)

    def fleet_spend(self, now: datetime) -> dict[tuple[str, str], tuple[int, float]]:
        """(probes, USD) of the last hour by (rule, target), every replica's, from the store
        (blocking). The USD are summed over the newest `max_per_hour` probes: beyond them the
        rate cap is reached anyway."""
        assert self.fleet is not None
        hour_ago = now - timedelta(hours=1)
        seen: dict[tuple[str, str], tuple[int, float]] = {}
        for rule in list(self.rules.values()):
            for target, tally in self.fleet.tallies(rule.name, since=hour_ago).items():
                usd = 0.0
                if rule.spec.max_usd_per_hour is not None:
                    recent = self.fleet.recent(
                        rule.name, target=target, since=hour_ago, limit=rule.spec.max_per_hour
                    )
                    usd = math.fsum(p.cost_usd for p in recent)
                seen[(rule.name, target)] = (tally.probes, usd)
        return seen

    async def _follow_fleet(self) -> None:
        """Read the fleet's spend every `fleet_refresh_s` until the gateway stops (a store
        outage keeps the last reading and the local counts)."""
        stopping = self._stopping
        assert stopping is not None  # made by `start`
        while self.accepting:
            try:
                seen = await asyncio.to_thread(self.fleet_spend, datetime.now(UTC))
            except Exception as exc:  # the local caps still hold; the next read may work
                log.warning("probes: the fleet's probe spend could not be read: %s", exc)
            else:
                self.fleet_seen, self.since_read = seen, {}
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), self.fleet_refresh_s)

    def start(self, shed_lag_s: float = 0.0, shed_busy: float = 0.0, **monitor: Any) -> None:
        """From the gateway's lifespan, on the serving loop. Without a shared overload monitor,
        start one of its own when a threshold is set (`shed_lag_s`, `shed_busy`); with a
        `fleet` store, start reading the fleet's hourly spend."""
        if self.fleet is not None and self.rules and not len(self._follower):
            self._stopping = asyncio.Event()
            self._follower.spawn(self._follow_fleet(), "probe:fleet")
        if self.overload is None and (shed_lag_s > 0 or shed_busy > 0):
            own = self.overload = LoopLoadMonitor(shed_lag_s, shed_busy, **monitor)
            self._owns_overload = True
            # The loop's readings, as the shadows' monitor exposes them when shadows run.
            self.metrics.loop_lag.set_function(lambda: own.lag_s)
            self.metrics.loop_busy.set_function(lambda: own.busy)
            own.start()

    async def stop(self, timeout_s: float) -> None:
        """Refuse new probes, give running ones `timeout_s`, then cancel the rest (counted)."""
        self.accepting = False
        # The fleet reader ends after its read in flight: cancelled mid-read, its worker thread
        # would still hold a store connection when the gateway closes the store.
        if self._stopping is not None:
            self._stopping.set()
        await self._follower.wait(timeout_s)
        await self._follower.cancel_all()
        if self.overload is not None and self._owns_overload:
            await self.overload.stop()
        await self.tasks.wait(timeout_s)
        cancelled = await self.tasks.cancel_all()
        if cancelled:
            log.info("probes: %d calls still running at shutdown were cancelled", cancelled)


def probe_id(request_id: str, target: str) -> str:
    """The probe's id: unique per (request, target), 32 hex digits like a uuid4's (derived, like
    a shadow pair's id, so that no call reads the OS's random source)."""
    key = f"{request_id}\x00probe\x00{target}".encode()
    return hashlib.blake2b(key, digest_size=16).hexdigest()
