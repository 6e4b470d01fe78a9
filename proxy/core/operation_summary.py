"""One business operation summed up: its arm, its calls, what they cost, how long it took end to
end and what came of it.

Pure: the calls come from the store (and, for calls still in the recorder's queue, from the
recent-exchanges index), the outcomes from the store; `summarize` adds them up the same way for
the admin API, the outcome metrics and the experiments.

What counts where:

- **client calls** — the arms that answer the application: primary, canary, fallback and an
  experiment's arms (counted as their experiment arm). A
  request whose first call failed before any byte reached the client and was tried again on the
  fallback model has two calls; `fallbacks` counts those second tries. A retry by the
  application itself is a new request of the same operation.
- **judge calls** — the LLM judge scoring one of the operation's requests: part of what the
  operation cost.
- **shadow and probe calls** — candidates answering the same requests off the client path: not
  the operation's calls and not in its `cost_usd`; counted apart (`shadow_calls`,
  `shadow_cost_usd`, `probe_calls`, `probe_cost_usd`) so what evaluating costs stays visible.

`cost_usd` is client calls plus judge calls; the latency is from the first client call's start to
the last one's end.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from .records import Arm, ExchangeRecord, OutcomeRecord, Status

CLIENT_ARMS = frozenset(
    {Arm.PRIMARY.value, Arm.CANARY.value, Arm.FALLBACK.value, Arm.EXPERIMENT.value}
)
"""The arms whose calls are the operation's own (they answered the application): an
experiment's arms are served as `experiment`."""


@dataclass(frozen=True, slots=True)
class OperationCall:
    """One exchange of an operation, as much as its summary needs."""

    request_id: str
    route: str
    target: str
    arm: str
    """The record's arm (primary, canary, fallback, judge, shadow, probe)."""
    served_as: str
    """What the operation counts as its arm: the experiment arm when the call ran in one,
    else `arm`."""
    started_at: datetime
    duration_s: float
    ok: bool
    """The call ended `ok`."""
    cost_usd: float

    @property
    def key(self) -> tuple[str, str, str, datetime]:
        """Who the call is, whether read from the store or from memory: one upstream call."""
        return (self.request_id, self.arm, self.target, self.started_at)

    @property
    def ended_at(self) -> datetime:
        return self.started_at + timedelta(seconds=self.duration_s)


def operation_call(record: ExchangeRecord) -> OperationCall:
    """The call of `record` (an exchange of some operation)."""
    return OperationCall(
        request_id=record.request_id,
        route=record.route,
        target=record.target,
        arm=record.arm.value,
        served_as=record.experiment_arm or record.arm.value,
        started_at=record.started_at,
        duration_s=record.duration_s,
        ok=record.status is Status.OK,
        cost_usd=record.cost_usd,
    )


@dataclass(frozen=True, slots=True)
class OperationSummary:
    """One business operation: its calls added up and its outcomes."""

    operation_id: str
    route: str | None
    """The route of its first client call (None: no client call is known)."""
    arm: str | None
    """The arm its first client call was served on: the experiment arm when it ran in one,
    else primary, canary or fallback."""
    arms: tuple[str, ...]
    """Every arm its client calls were served on, first seen first."""
    routes: tuple[str, ...]
    """Every route its client calls went to, first seen first."""
    requests: int
    """Client requests (each may have been tried twice)."""
    calls: int
    """Client calls: requests plus fallback tries."""
    fallbacks: int
    """Requests tried again on the fallback model after their first call failed."""
    errors: int
    """Requests whose answer to the application was an error."""
    judge_calls: int
    shadow_calls: int
    probe_calls: int
    client_cost_usd: float
    judge_cost_usd: float
    cost_usd: float
    """What the operation cost: its client calls and its judge calls."""
    shadow_cost_usd: float
    """What mirroring its requests to candidates cost (not in `cost_usd`)."""
    probe_cost_usd: float
    """What rule-flip probes made from its requests cost (not in `cost_usd`)."""
    started_at: datetime | None
    ended_at: datetime | None
    latency_s: float | None
    """End to end: the last client call's end minus the first one's start."""
    outcomes: tuple[OutcomeRecord, ...] = ()
    """What its application said happened, oldest first."""

    def outcome(self, kind: str) -> OutcomeRecord | None:
        """The outcome of `kind`, if one was posted."""
        return next((o for o in self.outcomes if o.kind == kind), None)


def merged_calls(*sources: Iterable[OperationCall]) -> list[OperationCall]:
    """The calls of every source, each call once (the store and the recent index overlap),
    in start order."""
    unique: dict[tuple[str, str, str, datetime], OperationCall] = {}
    for source in sources:
        for call in source:
            unique.setdefault(call.key, call)
    return sorted(unique.values(), key=lambda c: c.started_at)


def summarize(
    operation_id: str, calls: Iterable[OperationCall], outcomes: Iterable[OutcomeRecord] = ()
) -> OperationSummary:
    """The summary of an operation from its calls (in any order, each once) and outcomes."""
    ordered = sorted(calls, key=lambda c: c.started_at)
    client = [c for c in ordered if c.arm in CLIENT_ARMS]
    by_request: dict[str, list[OperationCall]] = {}
    for call in client:
        by_request.setdefault(call.request_id, []).append(call)
    errors = 0
    for tries in by_request.values():
        # A second try is always the fallback's, so the answer the application got is its.
        final = next((c for c in tries if c.arm == Arm.FALLBACK.value), tries[-1])
        errors += not final.ok
    judge = [c for c in ordered if c.arm == Arm.JUDGE.value]
    shadow = [c for c in ordered if c.arm == Arm.SHADOW.value]
    probe = [c for c in ordered if c.arm == Arm.PROBE.value]
    client_cost = sum(c.cost_usd for c in client)
    judge_cost = sum(c.cost_usd for c in judge)
    started = min((c.started_at for c in client), default=None)
    ended = max((c.ended_at for c in client), default=None)
    return OperationSummary(
        operation_id=operation_id,
        route=client[0].route if client else None,
        arm=client[0].served_as if client else None,
        arms=tuple(dict.fromkeys(c.served_as for c in client)),
        routes=tuple(dict.fromkeys(c.route for c in client)),
        requests=len(by_request),
        calls=len(client),
        fallbacks=len(client) - len(by_request),
        errors=errors,
        judge_calls=len(judge),
        shadow_calls=len(shadow),
        probe_calls=len(probe),
        client_cost_usd=client_cost,
        judge_cost_usd=judge_cost,
        cost_usd=client_cost + judge_cost,
        shadow_cost_usd=sum(c.cost_usd for c in shadow),
        probe_cost_usd=sum(c.cost_usd for c in probe),
        started_at=started,
        ended_at=ended,
        latency_s=(ended - started).total_seconds() if started and ended else None,
        outcomes=tuple(sorted(outcomes, key=lambda o: o.created_at)),
    )
