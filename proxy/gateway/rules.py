"""Rule versions on every exchange, and the rule-change events they open.

A rule set (`rules.<name>` in config) governs some routes. For each request of such a route the
version is found, in this order: the version header (`version: header:<name>`) when the request
carries it; the first `versions.<v>.match_prompt` that matches the system prompt; otherwise a
fingerprint of the normalised system prompt (`fp-<12 hex>`), so that editing a prompt is a rule
change with zero configuration.

The first exchange with a version the gateway has not seen for that rule is a **rule-change event**:
`RuleTracker.observe` notices it at once (a set lookup) and persists it off the client path with its
time, the previous version and — when bodies are stored — a diff of the system prompt. While the
store is unreachable the event is retried with backoff until it is written: the rollout judge reads
epochs from the store, so a rule change first seen during an outage must not be forgotten.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine

from analyzers.rule_version import extract_system_prompt, fingerprint, system_prompt_diff
from proxy.config import MirrorgateConfig, RuleSpec
from proxy.core import TaskSet
from proxy.observability import GatewayMetrics

log = logging.getLogger("mirrorgate.rules")
_HEADER_VERSION = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_RETRY_INITIAL_S = 0.05
_RETRY_MAX_S = 5.0
_UNREACHABLE = (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError)
"""What a write raises while the database cannot be reached (retrying later may succeed)."""

_events = sa.Table(
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
)
rule_events_table = _events
_SEEN_ORDER = (_events.c.first_seen_at, _events.c.id)
"""Events in the order their versions were first seen (ties, if any, in insertion order)."""


@dataclass(frozen=True, slots=True)
class RuleMatch:
    """The rule set governing a request and the version it carries."""

    rule: str
    version: str
    system_prompt: str


@dataclass(frozen=True, slots=True)
class _Binding:
    name: str
    spec: RuleSpec
    header: bytes | None
    patterns: tuple[tuple[str, re.Pattern[str]], ...]


class RuleResolver:
    """Finds (rule, version) for a request; routes without a rule set get None."""

    def __init__(self, config: MirrorgateConfig) -> None:
        self._by_route: dict[str, _Binding] = {}
        for name, spec in config.rules.items():
            header = (
                spec.version.partition(":")[2].lower().encode()
                if spec.version != "fingerprint"
                else None
            )
            patterns = tuple(
                (version, re.compile(v.match_prompt))
                for version, v in spec.versions.items()
                if v.match_prompt is not None
            )
            binding = _Binding(name, spec, header, patterns)
            for route in spec.routes:
                self._by_route.setdefault(route, binding)

    def resolve(
        self,
        route: str,
        endpoint: str,
        payload: Mapping[str, Any],
        headers: Sequence[tuple[bytes, bytes]],
    ) -> RuleMatch | None:
        binding = self._by_route.get(route)
        if binding is None:
            return None
        prompt = extract_system_prompt(endpoint, payload)
        if binding.header is not None:
            for key, value in headers:
                if key == binding.header:
                    given = value.strip().decode("latin-1")
                    if _HEADER_VERSION.fullmatch(given):  # anything else would be a metric label
                        return RuleMatch(binding.name, given, prompt)
                    break
        for version, pattern in binding.patterns:
            if pattern.search(prompt):
                return RuleMatch(binding.name, version, prompt)
        return RuleMatch(binding.name, f"fp-{fingerprint(prompt)}", prompt)


@dataclass(frozen=True, slots=True)
class RuleEvent:
    """The first exchange of a rule version."""

    rule: str
    version: str
    previous_version: str | None
    first_seen_at: datetime
    request_id: str
    route: str
    prompt_diff: str | None


class RuleTracker:
    """Remembers the versions seen per rule and persists each new one as a rule-change event."""

    def __init__(self, engine: Engine, keep_prompts: bool, metrics: GatewayMetrics) -> None:
        self._engine = engine
        self._metrics = metrics
        self._keep_prompts = keep_prompts
        self._known: set[tuple[str, str]] = set()
        self._latest: dict[str, tuple[str, str]] = {}
        """rule → (version, system prompt) of the newest version seen."""
        self.tasks = TaskSet("rules")

    def load(self) -> None:
        """Read the versions already known (at start, on a worker thread)."""
        with self._engine.connect() as conn:
            # In the order they were seen: events are stored by concurrent tasks, so two
            # changes a few milliseconds apart may be inserted the other way round.
            rows = conn.execute(sa.select(_events).order_by(*_SEEN_ORDER)).mappings().all()
        for row in rows:
            self._known.add((row["rule"], row["version"]))
            self._latest[row["rule"]] = (row["version"], "")

    def observe(self, match: RuleMatch, route: str, request_id: str) -> RuleEvent | None:
        """Note one request's version; return (and start persisting) the event if it is new."""
        key = (match.rule, match.version)
        if key in self._known:
            latest = self._latest.get(match.rule)
            if latest is not None and latest[0] == match.version and not latest[1]:
                self._latest[match.rule] = (match.version, match.system_prompt)
            return None
        self._known.add(key)
        previous = self._latest.get(match.rule)
        diff = None
        if self._keep_prompts and previous is not None and previous[1]:
            diff = system_prompt_diff(previous[1], match.system_prompt)
        event = RuleEvent(
            rule=match.rule,
            version=match.version,
            previous_version=previous[0] if previous else None,
            first_seen_at=datetime.now(UTC),
            request_id=request_id,
            route=route,
            prompt_diff=diff,
        )
        self._latest[match.rule] = (match.version, match.system_prompt)
        self._metrics.rule_changes.labels(match.rule).inc()
        self.tasks.spawn(self._persist_until_stored(event), f"event:{match.rule}")
        log.info("rule change: %s %s -> %s", match.rule, event.previous_version, match.version)
        return event

    async def _persist_until_stored(self, event: RuleEvent) -> None:
        delay = _RETRY_INITIAL_S
        while True:
            try:
                await asyncio.to_thread(self._persist, event)
            except _UNREACHABLE as exc:
                if delay == _RETRY_INITIAL_S:
                    log.warning(
                        "rule change %s %s not stored yet (the store is unreachable), retrying: %s",
                        event.rule,
                        event.version,
                        next(iter(str(exc).splitlines()), type(exc).__name__),
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RETRY_MAX_S)
            else:
                return

    def _persist(self, event: RuleEvent) -> None:
        row = {
            "rule": event.rule,
            "version": event.version,
            "previous_version": event.previous_version,
            "first_seen_at": event.first_seen_at,
            "request_id": event.request_id,
            "route": event.route,
            "prompt_diff": event.prompt_diff,
        }
        try:
            with self._engine.begin() as conn:
                conn.execute(sa.insert(_events), [row])
        except sa_exc.IntegrityError:
            pass  # another replica recorded this version first

    def events(self) -> list[RuleEvent]:
        """Every stored event, in the order the versions were first seen."""
        with self._engine.connect() as conn:
            rows = conn.execute(sa.select(_events).order_by(*_SEEN_ORDER)).mappings().all()
        return [
            RuleEvent(
                rule=r["rule"],
                version=r["version"],
                previous_version=r["previous_version"],
                first_seen_at=r["first_seen_at"].replace(tzinfo=r["first_seen_at"].tzinfo or UTC),
                request_id=r["request_id"],
                route=r["route"],
                prompt_diff=r["prompt_diff"],
            )
            for r in rows
        ]
