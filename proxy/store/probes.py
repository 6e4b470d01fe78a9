"""Rule-flip probes' results: one row per scored probe in `probe_results` (migration 12), and
what the score surfaces read of them — per target the followed, stuck and other counts of a rule
(optionally of one route, one version, since a moment) and example probes.

The probe's call itself is an ordinary exchange (arm `probe`, its `pair_id` the probe's id), so
its latency, cost and error land where every other call's do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from proxy.core import ProbeRecord, as_utc

from .errors import translated

if TYPE_CHECKING:  # the store writes this module's rows; importing it here would be circular
    from .exchanges import Store

ANSWERED_VALUE_MAX = 200
"""Characters of an answer's stated value that are kept."""

probe_results_table = sa.Table(
    "probe_results",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("probe_id", sa.String()),
    sa.Column("request_id", sa.String()),
    sa.Column("route", sa.String()),
    sa.Column("target", sa.String()),
    sa.Column("rule", sa.String()),
    sa.Column("rule_version", sa.String()),
    sa.Column("created_at", sa.DateTime(timezone=True)),
    sa.Column("original_value", sa.String()),
    sa.Column("asked_value", sa.String()),
    sa.Column("answered_value", sa.String()),
    sa.Column("result", sa.String()),
    sa.Column("cost_usd", sa.Float()),
)
_probes = probe_results_table


def probe_to_row(record: ProbeRecord) -> dict[str, Any]:
    answered = record.answered_value
    return {
        "probe_id": record.probe_id,
        "request_id": record.request_id,
        "route": record.route,
        "target": record.target,
        "rule": record.rule,
        "rule_version": record.rule_version,
        "created_at": as_utc(record.created_at),
        "original_value": record.original_value,
        "asked_value": record.asked_value,
        "answered_value": answered[:ANSWERED_VALUE_MAX] if answered is not None else None,
        "result": record.result,
        "cost_usd": float(record.cost_usd),
    }


def row_to_probe(row: sa.RowMapping) -> ProbeRecord:
    return ProbeRecord(
        probe_id=row["probe_id"],
        request_id=row["request_id"],
        route=row["route"],
        target=row["target"],
        rule=row["rule"],
        rule_version=row["rule_version"],
        created_at=as_utc(row["created_at"]),
        original_value=row["original_value"],
        asked_value=row["asked_value"],
        answered_value=row["answered_value"],
        result=row["result"],
        cost_usd=row["cost_usd"] or 0.0,
    )


@dataclass(frozen=True, slots=True)
class ProbeTally:
    """One target's scored probes of one rule."""

    followed: int = 0
    stuck: int = 0
    other: int = 0

    @property
    def probes(self) -> int:
        return self.followed + self.stuck + self.other


class ProbeStore:
    """Reads the probes' results (blocking: call from a worker thread; raises `StoreError`s only).
    Probe results are written by the recorder, like every other record."""

    def __init__(self, store: Store) -> None:
        self._engine = store.engine

    def tallies(
        self,
        rule: str,
        *,
        route: str | None = None,
        version: str | None = None,
        since: datetime | None = None,
        targets: Sequence[str] | None = None,
    ) -> dict[str, ProbeTally]:
        """target → its followed, stuck and other probes of `rule` (of `route`, of `version`,
        created at or after `since`, of `targets`, where given)."""
        c = _probes.c
        where = [c.rule == rule]
        if route is not None:
            where.append(c.route == route)
        if version is not None:
            where.append(c.rule_version == version)
        if since is not None:
            where.append(c.created_at >= as_utc(since))
        if targets is not None:
            where.append(c.target.in_(list(targets)))
        statement = (
            sa.select(c.target, c.result, sa.func.count())
            .where(*where)
            .group_by(c.target, c.result)
        )
        counts: dict[str, dict[str, int]] = {}
        with translated("counting probe results"), self._engine.connect() as conn:
            for row in conn.execute(statement):
                counts.setdefault(str(row[0]), {})[str(row[1])] = int(row[2])
        return {
            target: ProbeTally(by.get("followed", 0), by.get("stuck", 0), by.get("other", 0))
            for target, by in counts.items()
        }

    def recent(
        self,
        rule: str,
        *,
        route: str | None = None,
        target: str | None = None,
        result: str | None = None,
        since: datetime | None = None,
        limit: int = 5,
    ) -> list[ProbeRecord]:
        """The newest probes of `rule` matching every filter given, newest first (examples for
        alerts and the admin API)."""
        c = _probes.c
        where = [c.rule == rule]
        for column, value in ((c.route, route), (c.target, target), (c.result, result)):
            if value is not None:
                where.append(column == value)
        if since is not None:
            where.append(c.created_at >= as_utc(since))
        statement = (
            sa.select(_probes).where(*where).order_by(c.created_at.desc(), c.id.desc()).limit(limit)
        )
        with translated("reading probe results"), self._engine.connect() as conn:
            rows = conn.execute(statement).mappings().all()
        return [row_to_probe(row) for row in rows]
