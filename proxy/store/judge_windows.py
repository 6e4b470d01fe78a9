"""The rows the rollout judge reads: each compared arm's exchanges, corrections, rule check
verdicts, analyzer findings, and shadow pairs (with the LLM judge's scores) in one window, and the
rule versions' first sightings.

The primary arm is the baseline model serving as `primary`; the candidate arm is the canary model
serving as `canary`, both of the same route (`Arms`). Every query returns plain frozen rows or
counts; what the judge makes of them (`proxy.rollout.evidence`) is not the store's business.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from proxy.core import (
    CUT_SHORT,
    JUDGE_ANALYZER,
    JUDGE_SCORE_DELTA,
    Arm,
    Status,
    as_utc,
    pair_agreed,
)

from .checks import checks_table, findings_table
from .errors import translated
from .exchanges import Store, exchanges_table
from .feedback import feedback_table, is_correction_clause
from .pairs import pairs_table
from .probes import probe_results_table
from .rule_events import rule_events_table

_exchanges = exchanges_table
_checks = checks_table
_feedback = feedback_table
_findings = findings_table
_pairs = pairs_table
_rule_events = rule_events_table
_SAMPLE_COLUMNS = (
    _exchanges.c.arm, _exchanges.c.status, _exchanges.c.duration_s, _exchanges.c.ttft_s,
    _exchanges.c.cost_usd, _exchanges.c.sticky_unit,
)  # fmt: skip

KEYLESS_PREFIX = "r"
"""Starts the group of exchanges without a sticky unit (a unit is hex, never starting with it)."""

_SAMPLE_EDGE_DIGITS = 6
"""Hex digits of the request id compared with a thinned sample's edge (1 in 16.7 million)."""
_SAMPLE_SHARE = 0.95
"""A thinned arm keeps about this share of its cap on average: 19,000 of 20,000, some 7 standard
deviations of the binomial count below the cap, so that the cap's `LIMIT` (which would cut in the
rows' order, not at random) practically never applies, and no sort is needed."""

_STREAM_ROWS = 2000
"""Rows fetched at a time when a query streams (a server-side cursor on PostgreSQL)."""


@dataclass(frozen=True, slots=True)
class Arms:
    """Which (target, arm) pairs are compared: the baseline as primary, the candidate as canary,
    on one route."""

    route: str
    baseline: str
    candidate: str


@dataclass(frozen=True, slots=True)
class Epoch:
    """A version of a rule and when its first request was seen."""

    rule: str
    version: str
    started_at: datetime


@dataclass(frozen=True, slots=True)
class ArmExchange:
    """One exchange of a compared arm, as much of it as the judge reads."""

    arm: Arm
    """`Arm.PRIMARY` (the baseline) or `Arm.CANARY` (the candidate)."""
    status: str
    """A `Status` value, as stored."""
    duration_s: float
    ttft_s: float | None
    cost_usd: float
    unit: str | None = None
    """The request's sticky unit (`exchanges.sticky_unit`); None without a key."""


@dataclass(frozen=True, slots=True)
class UnitCount:
    """One tally of one compared arm, for one unit group (`unit_group`)."""

    arm: Arm
    unit: str
    """The group: the request's sticky unit, or `KEYLESS_PREFIX` and the last three hex digits
    of the request id for the exchanges without one (independent requests, merged by their random id
    into at most 4,096 groups: a union of independent units is still a valid unit)."""
    events: int
    total: int


@dataclass(frozen=True, slots=True)
class CheckCount:
    """How many verdicts of one check on one arm had one result."""

    arm: Arm
    check: str
    result: str
    """`pass`, `fail` or `error` (the check could not judge the answer)."""
    count: int


@dataclass(frozen=True, slots=True)
class CheckUnitCount:
    """One check's (passed, verdicts) on one arm, for one unit group."""

    arm: Arm
    check: str
    count: UnitCount


@dataclass(frozen=True, slots=True)
class PairCount:
    """How many pairs of one kind and candidate agreed (or not) with the primary."""

    kind: str
    """`shadow` (a candidate asked the same request) or `noise` (the primary asked twice)."""
    candidate_target: str
    agreed: bool
    count: int


@dataclass(frozen=True, slots=True)
class PairUnitCount:
    """`PairCount`s of one kind and candidate for one unit group, disagreeing and in all."""

    kind: str
    candidate_target: str
    unit: str
    disagree: int
    pairs: int


@dataclass(frozen=True, slots=True)
class FindingCount:
    """One compared arm's answers analysed in a window, and those with a severe finding."""

    arm: Arm
    answers: int
    """The arm's answers that ended well (`ok`): the ones analyzers judge."""
    flagged: int
    """Those with at least one finding of the asked severities on the answer itself."""


def unit_group(
    unit: sa.ColumnElement[Any], request_id: sa.ColumnElement[Any]
) -> sa.ColumnElement[Any]:
    """The unit group of a row: its sticky unit, or for a request without one `KEYLESS_PREFIX`
    and the last three hex digits of its (random) request id."""
    return sa.func.coalesce(unit, sa.literal(KEYLESS_PREFIX) + _tail(request_id, 3))


def _tail(request_id: sa.ColumnElement[Any], digits: int) -> sa.ColumnElement[Any]:
    """The last `digits` characters of a request id: random hex digits of the gateway's ids,
    whatever prefix a test or an importer put before them (spelled the same on both backends)."""
    return sa.func.substr(request_id, sa.func.length(request_id) - (digits - 1), digits)


def _unit_of(request_id: sa.ColumnElement[Any]) -> sa.ScalarSelect[Any]:
    """The sticky unit of the client request `request_id` (every record of a request carries
    the same one; NULL when it had none): for rows that refer to a request and keep no unit of
    their own (probes, reviews)."""
    e = _exchanges.c
    return sa.select(sa.func.max(e.sticky_unit)).where(e.request_id == request_id).scalar_subquery()


def _compared(table: sa.Table, arms: Arms) -> sa.ColumnElement[bool]:
    return sa.and_(
        table.c.route == arms.route,
        sa.or_(
            sa.and_(table.c.arm == Arm.PRIMARY.value, table.c.target == arms.baseline),
            sa.and_(table.c.arm == Arm.CANARY.value, table.c.target == arms.candidate),
        ),
    )


class JudgeWindows:
    """The judge's window queries (blocking: call from a worker thread). Every method raises
    `StoreError`s only."""

    def __init__(self, store: Store) -> None:
        self._engine = store.engine

    def _rows(self, action: str, statement: sa.Executable) -> list[tuple[Any, ...]]:
        with translated(action), self._engine.connect() as conn:
            return [tuple(row) for row in conn.execute(statement)]

    def exchanges(
        self, arms: Arms, since: datetime, *, newest: int | None = None
    ) -> Iterator[ArmExchange]:
        """Every exchange of both compared arms that started at or after `since` — or, with
        `newest`, only that many of the latest — streamed in batches (a look holds one batch of
        rows, not all of them: consume it once, to the end)."""
        c = _exchanges.c
        statement = sa.select(*_SAMPLE_COLUMNS).where(
            _compared(_exchanges, arms), c.started_at >= since
        )
        if newest is not None:
            statement = statement.order_by(c.started_at.desc()).limit(newest)
        return self._stream(statement)

    def _stream(self, statement: sa.Select[Any]) -> Iterator[ArmExchange]:
        with translated("reading traffic"), self._engine.connect() as conn:
            rows = conn.execution_options(yield_per=_STREAM_ROWS).execute(statement)
            row: Any
            for row in rows:
                arm, status, duration, ttft, cost, unit = row
                yield ArmExchange(
                    Arm(arm), str(status), float(duration), ttft, float(cost or 0.0), unit
                )

    def samples(
        self, arms: Arms, arm: Arm, since: datetime, *, served: int, cap: int
    ) -> Iterator[ArmExchange]:
        """`arm`'s served exchanges (not cut short) that started at or after `since`: all of
        them when `served` (how many there are) is at most `cap`, else about `_SAMPLE_SHARE` of
        `cap` of them (never more than `cap`), thinned uniformly over the whole window: those
        whose request ids end in hex digits under an edge (random digits, so unrelated to time,
        latency or user). In no particular order, streamed as `exchanges`."""
        c = _exchanges.c
        statement = sa.select(*_SAMPLE_COLUMNS).where(
            _compared(_exchanges, arms), c.arm == arm.value, c.started_at >= since,
            c.status.not_in(tuple(status.value for status in CUT_SHORT)),
        )  # fmt: skip
        if served > cap:
            edge = int(_SAMPLE_SHARE * cap / served * 16**_SAMPLE_EDGE_DIGITS)
            statement = statement.where(self._id_tail(c.request_id) < f"{edge:06x}").limit(cap)
        return self._stream(statement)

    def _group(
        self, unit: sa.ColumnElement[Any], request_id: sa.ColumnElement[Any]
    ) -> sa.ColumnElement[Any]:
        """`unit_group`, compared in byte order on PostgreSQL: grouping thousands of units sorts
        them, and the database's language-aware collation made that sort most of the read."""
        group = unit_group(unit, request_id)
        return group.collate("C") if self._engine.dialect.name == "postgresql" else group

    def _id_tail(self, request_id: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        """The last `_SAMPLE_EDGE_DIGITS` characters of a request id, compared in byte order."""
        tail = _tail(request_id, _SAMPLE_EDGE_DIGITS)
        return tail.collate("C") if self._engine.dialect.name == "postgresql" else tail

    def has_units(self, arms: Arms, since: datetime) -> bool:
        """Whether some exchange of the compared arms that started at or after `since` has a
        sticky unit: when none has (a route without a sticky key), the judge reads the plain
        counts, as cheaply as it always did, and builds no breakdown."""
        c = _exchanges.c
        statement = (
            sa.select(c.id)
            .where(_compared(_exchanges, arms), c.started_at >= since)
            .where(c.sticky_unit.is_not(None))
            .limit(1)
        )
        return bool(self._rows("looking for sticky units", statement))

    def served_units(self, arms: Arms, since: datetime) -> list[UnitCount]:
        """`served_counts` per unit group (`unit_group`): (errors, exchanges) of each group of
        each compared arm, grouped in SQL; their sums are `served_counts`."""
        c = _exchanges.c
        group = self._group(c.sticky_unit, c.request_id)
        failed = sa.func.sum(sa.case((c.status == Status.OK.value, 0), else_=1))
        statement = (
            sa.select(c.arm, group, failed, sa.func.count())
            .where(_compared(_exchanges, arms), c.started_at >= since)
            .where(c.status.not_in(tuple(status.value for status in CUT_SHORT)))
            .group_by(c.arm, group)
        )
        return [
            UnitCount(Arm(arm), str(unit), int(errors or 0), int(count))
            for arm, unit, errors, count in self._rows("counting the judge's traffic", statement)
        ]

    def served_counts(self, arms: Arms, since: datetime) -> dict[Arm, tuple[int, int]]:
        """Per compared arm: (exchanges, those not `ok`) of the exchanges that started at or
        after `since`, leaving out those cut short (`proxy.core.CUT_SHORT`: the client or the
        gateway ended them). Arms without any: absent."""
        c = _exchanges.c
        failed = sa.func.sum(sa.case((c.status == Status.OK.value, 0), else_=1))
        statement = (
            sa.select(c.arm, sa.func.count(), failed)
            .where(_compared(_exchanges, arms), c.started_at >= since)
            .where(c.status.not_in(tuple(status.value for status in CUT_SHORT)))
            .group_by(c.arm)
        )
        return {
            Arm(arm): (int(count), int(errors or 0))
            for arm, count, errors in self._rows("counting the judge's traffic", statement)
        }

    def count_exchanges(self, arms: Arms, since: datetime) -> int:
        """How many exchanges of both compared arms started at or after `since`."""
        c = _exchanges.c
        statement = (
            sa.select(sa.func.count())
            .select_from(_exchanges)
            .where(_compared(_exchanges, arms), c.started_at >= since)
        )
        return int(self._rows("counting traffic", statement)[0][0])

    def oldest_start(self, arms: Arms, since: datetime) -> datetime | None:
        """When the oldest exchange of both compared arms at or after `since` started (where a
        young gateway's data begins); None when there is none."""
        c = _exchanges.c
        statement = sa.select(sa.func.min(c.started_at)).where(
            _compared(_exchanges, arms), c.started_at >= since
        )
        rows = self._rows("finding where the traffic begins", statement)
        return as_utc(rows[0][0]) if rows and rows[0][0] is not None else None

    def corrections(
        self, arms: Arms, since: datetime, *, per_caller: int | None = None
    ) -> dict[Arm, int]:
        """Corrected exchanges per compared arm: of the exchanges that started at or after
        `since` (client disconnects left out, as in the judge's denominator), how many have a
        correction (`proxy.core.is_correction`), whenever it arrived. Feedback is joined to its
        exchange by request id, arm and target, so a correction counts for the arm and the time
        of the answer it is about. Arms without any: absent.

        `per_caller` caps what one caller (the feedback's `caller`) adds to an arm's count, so
        that one sender cannot move a rate alone; feedback stored without a caller counts each
        exchange on its own. None: no cap."""
        e, f = _exchanges.c, _feedback.c
        about = sa.and_(f.request_id == e.request_id, f.arm == e.arm, f.target == e.target)
        statement = (
            sa.select(e.arm, f.caller, sa.func.count(sa.distinct(e.request_id)))
            .select_from(_exchanges.join(_feedback, about))
            .where(_compared(_exchanges, arms), e.started_at >= since)
            .where(
                e.status.not_in(tuple(status.value for status in CUT_SHORT)),
                is_correction_clause(_feedback),
            )
            .group_by(e.arm, f.caller)
        )
        counts: dict[Arm, int] = {}
        for arm, caller, count in self._rows("reading the judge's corrections", statement):
            n = int(count)
            if per_caller is not None and caller is not None:
                n = min(n, per_caller)
            counts[Arm(arm)] = counts.get(Arm(arm), 0) + n
        return counts

    def correction_units(
        self, arms: Arms, since: datetime, *, per_caller: int | None = None
    ) -> list[UnitCount]:
        """`corrections` per unit group (`unit_group`): (corrected, 0) of each group of each
        compared arm with a correction (the judge takes the totals from `served_units`). A
        caller capped at `per_caller` keeps its corrections of the groups that come first in
        the groups' order, up to the cap, so that the groups add up to `corrections`."""
        e, f = _exchanges.c, _feedback.c
        group = self._group(e.sticky_unit, e.request_id)
        about = sa.and_(f.request_id == e.request_id, f.arm == e.arm, f.target == e.target)
        statement = (
            sa.select(e.arm, f.caller, group, sa.func.count(sa.distinct(e.request_id)))
            .select_from(_exchanges.join(_feedback, about))
            .where(_compared(_exchanges, arms), e.started_at >= since)
            .where(
                e.status.not_in(tuple(status.value for status in CUT_SHORT)),
                is_correction_clause(_feedback),
            )
            .group_by(e.arm, f.caller, group)
            .order_by(e.arm, f.caller, group)
        )
        left: dict[tuple[str, Any], int] = {}
        counts: dict[tuple[Arm, str], int] = {}
        for arm, caller, unit, count in self._rows("reading the judge's corrections", statement):
            n = int(count)
            if per_caller is not None and caller is not None:
                allowed = left.setdefault((arm, caller), per_caller)
                n = min(n, allowed)
                left[(arm, caller)] = allowed - n
            if n:
                key = (Arm(arm), str(unit))
                counts[key] = counts.get(key, 0) + n
        return [UnitCount(arm, unit, n, 0) for (arm, unit), n in counts.items()]

    def units_of(self, request_ids: Sequence[str]) -> dict[str, str]:
        """Request id → its sticky unit, for those of `request_ids` that had one."""
        e = _exchanges.c
        found: dict[str, str] = {}
        ids = sorted(set(request_ids))
        for start in range(0, len(ids), 500):  # a bounded IN list per statement
            statement = (
                sa.select(e.request_id, sa.func.max(e.sticky_unit))
                .where(e.request_id.in_(ids[start : start + 500]), e.sticky_unit.is_not(None))
                .group_by(e.request_id)
            )
            found.update(
                (str(r), str(u)) for r, u in self._rows("reading the requests' units", statement)
            )
        return found

    def newest_version(self, rule: str) -> Epoch | None:
        """The version of `rule` first seen last, by any replica, and when."""
        c = _rule_events.c
        statement = (
            sa.select(c.version, c.first_seen_at)
            .where(c.rule == rule)
            .order_by(c.first_seen_at.desc())
            .limit(1)
        )
        rows = self._rows("reading the newest rule version", statement)
        return Epoch(rule, str(rows[0][0]), as_utc(rows[0][1])) if rows else None

    def first_seen(self, rule: str) -> dict[str, datetime]:
        """Version → when its first request was seen, for every version of `rule`."""
        c = _rule_events.c
        statement = sa.select(c.version, c.first_seen_at).where(c.rule == rule)
        rows = self._rows("reading rule versions", statement)
        return {str(version): as_utc(moment) for version, moment in rows}

    def checked_versions(self, arms: Arms, rule: str, since: datetime) -> dict[str, datetime]:
        """Version → its earliest check verdict, for every version of `rule` checked on either
        compared arm at or after `since`."""
        c = _checks.c
        statement = (
            sa.select(c.rule_version, sa.func.min(c.created_at))
            .where(_compared(_checks, arms), c.rule == rule, c.created_at >= since)
            .group_by(c.rule_version)
        )
        rows = self._rows("reading checked rule versions", statement)
        return {str(version): as_utc(earliest) for version, earliest in rows}

    def check_counts(self, arms: Arms, epoch: Epoch, since: datetime) -> list[CheckCount]:
        """Verdict counts per arm, check and result on `epoch`'s version at or after `since`."""
        c = _checks.c
        statement = (
            sa.select(c.arm, c.check_name, c.result, sa.func.count())
            .where(_compared(_checks, arms))
            .where(c.rule == epoch.rule, c.rule_version == epoch.version)
            .where(c.created_at >= since)
            .group_by(c.arm, c.check_name, c.result)
        )
        rows = self._rows("reading the judge's check verdicts", statement)
        return [
            CheckCount(Arm(arm), str(check), str(result), int(count))
            for arm, check, result, count in rows
        ]

    def check_units(self, arms: Arms, epoch: Epoch, since: datetime) -> list[CheckUnitCount]:
        """`check_counts` per unit group (`unit_group`) of the request each verdict is about
        (its exchange's sticky unit, kept with the verdict), grouped in SQL: (passed, verdicts)
        per arm, check and group; their sums are `check_counts`' (an error counts as not passed)."""
        c = _checks.c
        group = self._group(c.sticky_unit, c.request_id)
        passed = sa.func.sum(sa.case((c.result == "pass", 1), else_=0))
        statement = (
            sa.select(c.arm, c.check_name, group, passed, sa.func.count())
            .where(_compared(_checks, arms))
            .where(c.rule == epoch.rule, c.rule_version == epoch.version)
            .where(c.created_at >= since)
            .group_by(c.arm, c.check_name, group)
        )
        rows = self._rows("reading the judge's check verdicts per unit", statement)
        return [
            CheckUnitCount(
                Arm(arm), str(check), UnitCount(Arm(arm), str(unit), int(p or 0), int(n))
            )
            for arm, check, unit, p, n in rows
        ]

    def failed_requests(
        self, arms: Arms, epoch: Epoch, check: str, since: datetime, limit: int
    ) -> list[str]:
        """Request ids of the candidate's newest answers that did not pass `check` in the
        epoch, at most `limit`."""
        c = _checks.c
        statement = (
            sa.select(c.request_id)
            .where(c.route == arms.route, c.target == arms.candidate)
            .where(c.arm == Arm.CANARY.value, c.check_name == check)
            .where(c.rule == epoch.rule, c.rule_version == epoch.version)
            .where(c.result != "pass", c.created_at >= since)
            .order_by(c.created_at.desc())
            .limit(limit)
        )
        return [str(row[0]) for row in self._rows("reading failing examples", statement)]

    def pair_counts(self, arms: Arms, mode: str, since: datetime) -> list[PairCount]:
        """Pairs of the route's baseline since `since` where both answered well, counted by kind,
        candidate and agreement (`proxy.core.pair_agreed`: the verdict stored with each pair,
        made under the route's agreement mode, fields and tolerance). Pairs the comparison does
        not apply to are left out.

        `mode` is the route's agreement mode, read only for pairs stored without a verdict.
        """
        c = _pairs.c
        columns = (c.kind, c.candidate_target, c.agreement, c.exact_equal, c.normalized_equal)
        statement = (
            sa.select(*columns, sa.func.count())
            .where(
                c.route == arms.route,
                c.primary_target == arms.baseline,
                c.created_at >= since,
                c.primary_status == Status.OK.value,
                c.candidate_status == Status.OK.value,
            )
            .group_by(*columns)
        )
        counts: dict[tuple[str, str, bool], int] = {}
        for kind, target, agreement, exact, normalized, count in self._rows(
            "reading the judge's pairs", statement
        ):
            agreed = pair_agreed(agreement, mode, bool(exact), bool(normalized))
            if agreed is not None:
                key = (str(kind), str(target), agreed)
                counts[key] = counts.get(key, 0) + int(count)
        return [PairCount(kind, target, agreed, n) for (kind, target, agreed), n in counts.items()]

    def pair_units(self, arms: Arms, mode: str, since: datetime) -> list[PairUnitCount]:
        """`pair_counts` per unit group (`unit_group`) of each pair's client request (kept with
        the pair): (disagree,
        pairs) per kind, candidate and group, grouped in SQL (the verdict read as `pair_counts`
        reads it); their sums are `pair_counts`'."""
        c = _pairs.c
        group = self._group(c.sticky_unit, c.request_id)
        columns = (c.kind, c.candidate_target, c.agreement, c.exact_equal, c.normalized_equal)
        statement = (
            sa.select(*columns, group, sa.func.count())
            .where(
                c.route == arms.route,
                c.primary_target == arms.baseline,
                c.created_at >= since,
                c.primary_status == Status.OK.value,
                c.candidate_status == Status.OK.value,
            )
            .group_by(*columns, group)
        )
        counts: dict[tuple[str, str, str], list[int]] = {}
        for kind, target, agreement, exact, normalized, unit, count in self._rows(
            "reading the judge's pairs per unit", statement
        ):
            agreed = pair_agreed(agreement, mode, bool(exact), bool(normalized))
            if agreed is not None:
                tally = counts.setdefault((str(kind), str(target), str(unit)), [0, 0])
                tally[0] += 0 if agreed else int(count)
                tally[1] += int(count)
        return [PairUnitCount(k, t, u, d, n) for (k, t, u), (d, n) in counts.items()]

    def judge_deltas(self, arms: Arms, since: datetime) -> list[float]:
        """The LLM judge's score deltas (candidate minus primary) of the candidate's shadow pairs
        against the route's baseline, for pairs made at or after `since`, oldest pair first."""
        f, p = _findings.c, _pairs.c
        statement = (
            sa.select(f.value)
            .select_from(_findings.join(_pairs, p.pair_id == f.pair_id))
            .where(f.analyzer == JUDGE_ANALYZER, f.name == JUDGE_SCORE_DELTA, f.value.is_not(None))
            .where(p.route == arms.route, p.kind == "shadow", p.created_at >= since)
            .where(p.primary_target == arms.baseline, p.candidate_target == arms.candidate)
            .order_by(p.created_at, p.id, f.id)
        )
        return [float(row[0]) for row in self._rows("reading the judge's scores", statement)]

    def judge_delta_units(self, arms: Arms, since: datetime) -> list[tuple[float, str | None]]:
        """`judge_deltas`, each with the sticky unit of its pair's client request (None: none)."""
        f, p = _findings.c, _pairs.c
        statement = (
            sa.select(f.value, p.sticky_unit)
            .select_from(_findings.join(_pairs, p.pair_id == f.pair_id))
            .where(f.analyzer == JUDGE_ANALYZER, f.name == JUDGE_SCORE_DELTA, f.value.is_not(None))
            .where(p.route == arms.route, p.kind == "shadow", p.created_at >= since)
            .where(p.primary_target == arms.baseline, p.candidate_target == arms.candidate)
            .order_by(p.created_at, p.id, f.id)
        )
        rows = self._rows("reading the judge's scores", statement)
        return [(float(value), None if unit is None else str(unit)) for value, unit in rows]

    def finding_counts(
        self, arms: Arms, severities: Sequence[str], since: datetime
    ) -> list[FindingCount]:
        """Per compared arm with answers: its `ok` exchanges that started at or after `since`,
        and how many of them have a finding (on the answer, not on a pair) whose severity is one
        of `severities`. Attributed to the exchange's arm and start, not the finding's time."""
        e, f = _exchanges.c, _findings.c
        flagged = (
            sa.exists()
            .where(f.request_id == e.request_id, f.route == e.route)
            .where(f.target == e.target, f.arm == e.arm, f.pair_id.is_(None))
            .where(f.severity.in_(list(severities)))
        )
        statement = (
            sa.select(e.arm, sa.func.count(), sa.func.sum(sa.case((flagged, 1), else_=0)))
            .where(_compared(_exchanges, arms), e.started_at >= since)
            .where(e.status == Status.OK.value)
            .group_by(e.arm)
        )
        rows = self._rows("reading the judge's findings", statement)
        return [FindingCount(Arm(arm), int(n), int(hits or 0)) for arm, n, hits in rows]

    def adaptation_units(
        self, rule: str, since: datetime, targets: Sequence[str]
    ) -> dict[str, list[UnitCount]]:
        """Per target of `targets`: its scored rule-flip probes of `rule` created at or after
        `since`, as (not followed, probes) per unit group (`unit_group`) of the live request each
        probe re-sent, grouped in SQL; their sums are `ProbeStore.tallies`' (stuck and other are
        not followed). The `arm` of each count is `Arm.PROBE`."""
        c = probe_results_table.c
        group = self._group(_unit_of(c.request_id), c.request_id)
        missed = sa.func.sum(sa.case((c.result == "followed", 0), else_=1))
        statement = (
            sa.select(c.target, group, missed, sa.func.count())
            .where(c.rule == rule, c.created_at >= since, c.target.in_(list(targets)))
            .group_by(c.target, group)
        )
        found: dict[str, list[UnitCount]] = {}
        for target, unit, m, n in self._rows("reading the probes per unit", statement):
            found.setdefault(str(target), []).append(
                UnitCount(Arm.PROBE, str(unit), int(m or 0), int(n))
            )
        return found

    def finding_units(
        self, arms: Arms, severities: Sequence[str], since: datetime
    ) -> list[UnitCount]:
        """`finding_counts` per unit group (`unit_group`): (flagged, answers) of each group of
        each compared arm, grouped in SQL; their sums are `finding_counts`'."""
        e, f = _exchanges.c, _findings.c
        group = self._group(e.sticky_unit, e.request_id)
        flagged = (
            sa.exists()
            .where(f.request_id == e.request_id, f.route == e.route)
            .where(f.target == e.target, f.arm == e.arm, f.pair_id.is_(None))
            .where(f.severity.in_(list(severities)))
        )
        statement = (
            sa.select(e.arm, group, sa.func.sum(sa.case((flagged, 1), else_=0)), sa.func.count())
            .where(_compared(_exchanges, arms), e.started_at >= since)
            .where(e.status == Status.OK.value)
            .group_by(e.arm, group)
        )
        rows = self._rows("reading the judge's findings per unit", statement)
        return [UnitCount(Arm(a), str(u), int(h or 0), int(n)) for a, u, h, n in rows]
