"""Rule-change events: the first exchange of each rule version, one row each in `rule_events`
(migration 4), and the traffic each version has carried since. Migration 20 adds each version's
learned template (`template`).

The gateway's rule tracker writes an event the first time it sees a version; every replica may see
it, and the unique (rule, version) key keeps the first. The admin API lists the events with their
traffic, the report reads them to say when each version began, and the rollout judge's epochs
start at them (`proxy.store.judge_windows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from proxy.core import Arm, as_utc

from .errors import DuplicateRecordError, translated
from .exchanges import Store, exchanges_table

rule_events_table = sa.Table(
    "rule_events",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("rule", sa.String()),
    sa.Column("version", sa.String()),
    sa.Column("previous_version", sa.String()),
    sa.Column("first_seen_at", sa.DateTime(timezone=True)),
    sa.Column("request_id", sa.String()),
    sa.Column("route", sa.String()),
    sa.Column("prompt_diff", sa.Text()),
    sa.Column("rule_value", sa.String()),
    sa.Column("template", sa.Text()),
)
_events = rule_events_table


@dataclass(frozen=True, slots=True)
class RuleEvent:
    """The first exchange of a rule version."""

    rule: str
    """The rule set (`rules.<name>` in config)."""
    version: str
    """The version that exchange carried."""
    previous_version: str | None
    """The version seen before it by the replica that noticed the change (None: the first)."""
    first_seen_at: datetime
    """When the exchange arrived (aware, UTC)."""
    request_id: str
    """The exchange's `x-mirrorgate-request-id`."""
    route: str
    """The route it was asked on."""
    prompt_diff: str | None
    """Unified diff of the system prompt against the previous version's (None when bodies are
    not kept, or for the first version)."""
    rule_value: str | None = None
    """The value of the rule's parameter (`probes.parameter`, or a phantom_rule check's own) in
    the version's system prompt, at most 100 characters; None when the rule has no parameter,
    the prompt carries no value, or the event predates migration 12."""
    template: str | None = None
    """The version's learned template (`analyzers.rule_template.dumps`: word digests and slots,
    no word of the prompt), so that a restarted gateway matches prompts to it; None for a
    version that is no template (named, a header value, `template: off`, or before
    migration 20)."""


@dataclass(frozen=True, slots=True)
class VersionTraffic:
    """The recorded exchanges that carried one rule version."""

    exchanges: int
    first_seen: datetime
    """Start of the oldest of them (aware, UTC)."""
    last_seen: datetime
    """Start of the newest."""


class RuleEventStore:
    """Reads and writes rule-change events (blocking: call from a worker thread). Every method
    raises `StoreError`s only."""

    def __init__(self, store: Store) -> None:
        self._engine = store.engine
        self._text = store.text

    def add(self, event: RuleEvent) -> bool:
        """Store `event`; False (nothing changes) when the version already has its event."""
        row = {
            "rule": event.rule,
            "version": event.version,
            "previous_version": event.previous_version,
            "first_seen_at": as_utc(event.first_seen_at),
            "request_id": event.request_id,
            "route": event.route,
            "prompt_diff": self._text.derived(event.prompt_diff),
            "rule_value": self._text.text(_short(event.rule_value)),
            "template": event.template,
        }
        try:
            with translated("storing a rule change", writing=True), self._engine.begin() as conn:
                conn.execute(sa.insert(_events), [row])
        except DuplicateRecordError:
            return False
        return True

    def set_template(self, rule: str, version: str, template: str) -> None:
        """Replace the stored template of (rule, version): it learned a slot while open."""
        statement = (
            sa.update(_events)
            .where(_events.c.rule == rule, _events.c.version == version)
            .values(template=template)
        )
        with translated("storing a rule template", writing=True), self._engine.begin() as conn:
            conn.execute(statement)

    def events(self) -> list[RuleEvent]:
        """Every event, in the order their versions were first seen (there are few: one per
        version). Not in insertion order: events are stored by concurrent tasks, so two changes a
        few milliseconds apart may be inserted the other way round; ties keep insertion order."""
        with translated("reading rule changes"), self._engine.connect() as conn:
            query = sa.select(_events).order_by(_events.c.first_seen_at, _events.c.id)
            rows = conn.execute(query).mappings().all()
        return [
            RuleEvent(
                rule=row["rule"],
                version=row["version"],
                previous_version=row["previous_version"],
                first_seen_at=as_utc(row["first_seen_at"]),
                request_id=row["request_id"],
                route=row["route"],
                prompt_diff=row["prompt_diff"],
                rule_value=row["rule_value"],
                template=row["template"],
            )
            for row in rows
        ]

    def recent_versions(self, limit: int = 2_000) -> dict[str, list[str]]:
        """rule → the versions its newest `limit` exchanges (of any rule) carried, most recently
        seen first: which versions are in use, for the tracker's start, read through the index
        on `started_at` (no scan of the table)."""
        c = exchanges_table.c
        newest = (
            sa.select(c.rule, c.rule_version)
            .where(c.rule.is_not(None), c.rule_version.is_not(None))
            .order_by(c.started_at.desc())
            .limit(limit)
        )
        with translated("reading the newest rule versions"), self._engine.connect() as conn:
            rows = [tuple(row) for row in conn.execute(newest)]
        seen: dict[str, list[str]] = {}
        for rule, version in rows:
            versions = seen.setdefault(str(rule), [])
            if version not in versions:
                versions.append(str(version))
        return seen

    def traffic(self) -> dict[tuple[str, str], VersionTraffic]:
        """(rule, version) → the recorded exchanges that carried it, for every version seen in
        the exchanges table. Probe calls carry the version of the live request they were made
        from but ask another value of the rule: they are not the version's traffic."""
        c = exchanges_table.c
        statement = (
            sa.select(
                c.rule, c.rule_version, sa.func.count(), sa.func.min(c.started_at),
                sa.func.max(c.started_at),
            )
            .where(c.rule.is_not(None), c.arm != Arm.PROBE.value)
            .group_by(c.rule, c.rule_version)
        )  # fmt: skip
        with translated("counting exchanges per rule version"), self._engine.connect() as conn:
            rows: list[tuple[Any, ...]] = [tuple(row) for row in conn.execute(statement)]
        return {
            (str(rule), str(version)): VersionTraffic(int(count), as_utc(first), as_utc(last))
            for rule, version, count, first, last in rows
        }


def _short(value: str | None) -> str | None:
    """A rule value as stored: at most 100 characters (they are short; a longer one is cut)."""
    return None if value is None else value[:100]
