"""Rule versions on every exchange, and the rule-change events they open.

A rule set (`rules.<name>` in config) governs some routes. For each request of such a route the
version is found by `analyzers.rule_version.resolve_version`, in this order: the version header
(`version: header:<name>`) when the request carries it; the first `versions.<v>.match_prompt`
found in the system prompt's first 16,384 characters; otherwise a fingerprint of the normalised
system prompt (`fp-<12 hex>`), so that editing a prompt is a rule change with zero configuration.

The first exchange with a version the gateway has not seen for that rule is a **rule-change event**:
`RuleTracker.observe` notices it at once (a set lookup) and persists it off the client path with its
time, the previous version and — when bodies are stored — a diff of the system prompt. While the
store is unavailable the event is retried with backoff (the store's one retry loop,
`proxy.store.WriteRetry`) until it is written: the rollout judge reads epochs from the store, so a
rule change first seen during an outage must not be forgotten.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from analyzers.rule_version import extract_system_prompt, resolve_version, system_prompt_diff
from proxy.config import MirrorgateConfig
from proxy.core import TaskSet
from proxy.observability import GatewayMetrics
from proxy.store import RuleEvent, RuleEventStore, StoreUnavailableError, WriteRetry

log = logging.getLogger("mirrorgate.rules")


@dataclass(frozen=True, slots=True)
class RuleMatch:
    """The rule set governing a request and the version it carries."""

    rule: str
    version: str
    system_prompt: str


@dataclass(frozen=True, slots=True)
class _Binding:
    name: str
    version_setting: str
    """The rule's `version`: `fingerprint` or `header:<name>`."""
    patterns: Mapping[str, re.Pattern[str]]
    """Each version's `match_prompt`, compiled once, in config order."""


class RuleResolver:
    """Finds (rule, version) for a request; routes without a rule set get None."""

    def __init__(self, config: MirrorgateConfig) -> None:
        self._by_route: dict[str, _Binding] = {}
        for name, spec in config.rules.items():
            patterns = {
                version: re.compile(v.match_prompt)
                for version, v in spec.versions.items()
                if v.match_prompt is not None
            }
            binding = _Binding(name, spec.version, patterns)
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
        resolved = resolve_version(binding.version_setting, headers, prompt, binding.patterns)
        return RuleMatch(binding.name, resolved.version, prompt)


class RuleTracker:
    """Remembers the versions seen per rule and persists each new one as a rule-change event."""

    def __init__(self, events: RuleEventStore, keep_prompts: bool, metrics: GatewayMetrics) -> None:
        self._events = events
        self._retry = WriteRetry()
        self._metrics = metrics
        self._keep_prompts = keep_prompts
        self._known: set[tuple[str, str]] = set()
        self._latest: dict[str, tuple[str, str]] = {}
        """rule → (version, system prompt) of the newest version seen."""
        self.tasks = TaskSet("rules")

    def load(self) -> None:
        """Read the versions already known (at start, on a worker thread)."""
        for event in self._events.events():
            self._known.add((event.rule, event.version))
            self._latest[event.rule] = (event.version, "")

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
        def unavailable(exc: StoreUnavailableError, failures: int) -> None:
            if failures == 1:
                log.warning(
                    "rule change %s %s not stored yet (the store is unavailable), retrying: %s",
                    event.rule,
                    event.version,
                    next(iter(str(exc).splitlines()), type(exc).__name__),
                )

        # `add` answers False when another replica recorded this version first: done as well.
        await self._retry.call_async(
            functools.partial(self._events.add, event), on_unavailable=unavailable
        )
