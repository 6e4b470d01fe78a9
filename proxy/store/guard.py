"""What the production model's guard reads and remembers: per (arm, target) of a route, the answers
checked on one rule version and those failing any of its checks; the rule's newest version and
the one before; and one row per (route, rule, version) the guard has decided on, in
`guard_decisions` (migration 13).

A decision row is inserted once (unique on route, rule and version), before the alert goes out,
so two replicas or a restarted gateway never alert twice on one version; a switch updates the
row to `switched` after the rollout row that carries the switch itself was committed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from proxy.core import Arm, as_utc

from .checks import checks_table
from .errors import DuplicateRecordError, translated
from .judge_windows import Epoch
from .rule_events import rule_events_table

if TYPE_CHECKING:
    from .exchanges import Store

guard_decisions_table = sa.Table(
    "guard_decisions",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("route", sa.String()),
    sa.Column("rule", sa.String()),
    sa.Column("version", sa.String()),
    sa.Column("outcome", sa.String()),
    sa.Column("model", sa.String()),
    sa.Column("reason", sa.Text()),
    sa.Column("evidence", sa.Text()),
    sa.Column("decided_at", sa.DateTime(timezone=True)),
)
_decisions = guard_decisions_table
_checks = checks_table
_events = rule_events_table

GUARD_OUTCOMES = ("alerted", "switched")
"""A decision row's outcome: the regression was alerted on (and, in switch mode, no candidate
qualified yet), or the route was switched away."""


@dataclass(frozen=True, slots=True)
class AnswerTally:
    """One (arm, target)'s answers judged on a rule version, and those failing any check."""

    arm: Arm
    target: str
    answers: int
    failing: int


@dataclass(frozen=True, slots=True)
class RuleEpochs:
    """A rule's newest version and the one it replaced (None: the rule's first version)."""

    newest: Epoch
    previous: Epoch | None


@dataclass(frozen=True, slots=True)
class GuardDecision:
    route: str
    rule: str
    version: str
    outcome: str
    """One of `GUARD_OUTCOMES`."""
    model: str | None
    """The model switched to (None unless `switched`)."""
    reason: str
    decided_at: datetime


class GuardStore:
    """The guard's queries and its decision rows (blocking: call from a worker thread; raises
    `StoreError`s only)."""

    def __init__(self, store: Store) -> None:
        self._engine = store.engine
        self._text = store.text

    def _rows(self, action: str, statement: sa.Executable) -> list[tuple[Any, ...]]:
        with translated(action), self._engine.connect() as conn:
            return [tuple(row) for row in conn.execute(statement)]

    def epochs(self, rule: str) -> RuleEpochs | None:
        """The newest version of `rule` (first seen last, by any replica) and the version its
        event says it replaced, with when each was first seen; None before any event."""
        c = _events.c
        statement = (
            sa.select(c.version, c.previous_version, c.first_seen_at)
            .where(c.rule == rule)
            .order_by(c.first_seen_at.desc(), c.id.desc())
        )
        rows = self._rows("reading the rule's versions", statement)
        if not rows:
            return None
        version, previous, first = rows[0]
        newest = Epoch(rule, str(version), as_utc(first))
        if previous is None:
            return RuleEpochs(newest, None)
        before = next((r for r in rows[1:] if r[0] == previous), None)
        if before is None:  # the version it replaced opened before events were kept
            return RuleEpochs(newest, Epoch(rule, str(previous), as_utc(first)))
        return RuleEpochs(newest, Epoch(rule, str(previous), as_utc(before[2])))

    def answer_tallies(
        self, route: str, rule: str, version: str, since: datetime
    ) -> list[AnswerTally]:
        """Per (arm, target) of `route`: answers with a check verdict on `version` of `rule` made
        at or after `since` (each answer once, however many checks it had), and those with any
        verdict other than `pass` (a check that could not judge counts against the answer)."""
        c = _checks.c
        failing = sa.func.count(sa.distinct(sa.case((c.result != "pass", c.request_id))))
        statement = (
            sa.select(c.arm, c.target, sa.func.count(sa.distinct(c.request_id)), failing)
            .where(c.route == route, c.rule == rule, c.rule_version == version)
            .where(c.created_at >= as_utc(since))
            .group_by(c.arm, c.target)
        )
        return [
            AnswerTally(Arm(arm), str(target), int(answers), int(bad or 0))
            for arm, target, answers, bad in self._rows("reading the guard's checks", statement)
        ]

    def failing_requests(
        self,
        route: str,
        rule: str,
        version: str,
        *,
        arm: Arm,
        target: str,
        since: datetime,
        limit: int = 5,
    ) -> list[str]:
        """Request ids of the newest answers of (arm, target) that failed a check of `version`."""
        c = _checks.c
        statement = (
            sa.select(c.request_id)
            .where(c.route == route, c.rule == rule, c.rule_version == version)
            .where(c.arm == arm.value, c.target == target, c.result != "pass")
            .where(c.created_at >= as_utc(since))
            .group_by(c.request_id)
            .order_by(sa.func.max(c.created_at).desc())
            .limit(limit)
        )
        return [str(row[0]) for row in self._rows("reading failing examples", statement)]

    # --- decisions -----------------------------------------------------------------------------

    def decision(self, route: str, rule: str, version: str) -> GuardDecision | None:
        d = _decisions.c
        statement = sa.select(d.outcome, d.model, d.reason, d.decided_at).where(
            d.route == route, d.rule == rule, d.version == version
        )
        rows = self._rows("reading the guard's decisions", statement)
        if not rows:
            return None
        outcome, model, reason, decided_at = rows[0]
        return GuardDecision(route, rule, version, outcome, model, reason or "", as_utc(decided_at))

    def claim(
        self,
        route: str,
        rule: str,
        version: str,
        *,
        outcome: str,
        reason: str,
        evidence: Mapping[str, Any],
        now: datetime,
        model: str | None = None,
    ) -> bool:
        """Record the first decision on (route, rule, version); False if one already exists
        (another replica, or this gateway before a restart, made it)."""
        if outcome not in GUARD_OUTCOMES:
            raise ValueError(f"outcome must be one of {GUARD_OUTCOMES}, got {outcome!r}")
        row = {
            "route": route,
            "rule": rule,
            "version": version,
            "outcome": outcome,
            "model": model,
            "reason": self._text.text(reason),
            "evidence": self._text.text(json.dumps(evidence, default=str, sort_keys=True)),
            "decided_at": as_utc(now),
        }
        try:
            with translated("claiming a guard decision", writing=True), self._engine.begin() as c:
                c.execute(sa.insert(_decisions), [row])
        except DuplicateRecordError:
            return False
        return True

    def mark_switched(self, route: str, rule: str, version: str, model: str, now: datetime) -> None:
        """The decision on (route, rule, version) led to a switch to `model`."""
        d = _decisions.c
        statement = (
            sa.update(_decisions)
            .where(d.route == route, d.rule == rule, d.version == version)
            .values(outcome="switched", model=model, decided_at=as_utc(now))
        )
        with translated("recording the guard's switch", writing=True), self._engine.begin() as c:
            c.execute(statement)
