"""Rule versions on every exchange, and the rule-change events they open.

A rule set (`rules.<name>` in config) governs some routes. For each request of such a route that
has a system prompt the version is found by `analyzers.rule_version.resolve_version`, in this
order: the version header (`version: header:<name>`) when the request carries it; the first
`versions.<v>.match_prompt` found in the system prompt's first 16,384 characters; otherwise a
fingerprint of the normalised system prompt (`fp-<12 hex>`: per-request tokens such as dates, ids
and e-mail addresses masked, and the rule's `fingerprint_ignore` patterns), so that editing a
prompt is a rule change with zero configuration. A request without a system prompt (embeddings, a
health probe) carries no rule and no version: the rule's checks do not run on it.

`RuleTracker.observe` decides what a request's version opens, in memory and at once:

- a version already open (it has its event) opens nothing;
- a version named under `versions:` opens a **rule-change event** at its first request;
- any other version (a fingerprint, a header value) is *pending* until it has been seen on
  `version_min_requests` requests; then its event opens, dated at its first request and naming
  that request, so the checks of the requests before it are inside its epoch. Requests of a
  pending version carry it (their checks are stored under it) and open nothing. A rule remembers
  its `PENDING_MAX` most recently seen pending versions; an older one that never recurred is
  forgotten;
- once a rule has opened `max_versions` such versions, a further new version opens nothing and
  the request carries the version `overflow` instead (`mirrorgate_rule_versions_overflow_total`).

So a rule holds at most `max_versions` open versions (plus those named in config) and
`PENDING_MAX` pending ones, whatever the traffic. Events are persisted off the client path with
their time, the previous version and — when bodies are stored — a diff of the system prompt.
While the store is unavailable the event is retried with backoff (the store's one retry loop,
`proxy.store.WriteRetry`) until it is written: the rollout judge reads epochs from the store, so a
rule change first seen during an outage must not be forgotten.

A rule with a value parameter (`proxy.gateway.rule_values`) also has each version's value: the
tracker extracts it from the version's system prompt when the version opens, persists it with the
event (`rule_value`), reads it back in `load`, and learns the value of any version it does not
know yet (a pending one, a stored event without a value) from the prompt of its next request —
one regex search per version, not per request.
"""

from __future__ import annotations

import functools
import logging
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from analyzers.rule_template import PromptWords, dumps, loads, tokenize
from analyzers.rule_version import extract_system_prompt, resolve_version, system_prompt_diff
from proxy.config import MirrorgateConfig
from proxy.core import TaskSet, sticky_key
from proxy.observability import GatewayMetrics
from proxy.store import RuleEvent, RuleEventStore, StoreUnavailableError, WriteRetry, redact

from .rule_templates import First, Root, TemplateBook, unit_hash
from .rule_values import RuleValues

log = logging.getLogger("mirrorgate.rules")

OVERFLOW_VERSION = "overflow"
"""The version a request carries when its own would exceed its rule's `max_versions`."""
WORDS_CACHED_CHARS = 16_384
"""Prompts up to this long have their words remembered (`_words`): a route's static prompt is
split once; a huge one is split per request rather than kept."""
PENDING_MAX = 1024
"""Pending (not yet recurred) versions remembered per rule; the least recently seen goes first."""


@dataclass(frozen=True, slots=True)
class RuleMatch:
    """The rule set governing a request and the version it carries."""

    rule: str
    version: str
    system_prompt: str
    words: PromptWords | None = None
    """The prompt's words, when its version is a fingerprint and the rule learns templates
    (`template: auto`): the tracker then finds its template's version."""
    unit: str | None = None
    """The request's sticky key (the route's canary `sticky`), hashed; None without one."""


@dataclass(frozen=True, slots=True)
class _Binding:
    name: str
    version_setting: str
    """The rule's `version`: `fingerprint` or `header:<name>`."""
    patterns: Mapping[str, re.Pattern[str]]
    """Each version's `match_prompt`, compiled once, in config order."""
    ignore: tuple[re.Pattern[str], ...]
    """The rule's `fingerprint_ignore`, compiled once."""
    template: bool = True
    """`template: auto`."""
    parameter: re.Pattern[str] | None = None
    """The rule's value parameter: the words it spans are never a slot."""
    sticky: str = "none"
    """The route's canary `sticky` setting: what a unit is."""


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
            ignore = tuple(re.compile(pattern) for pattern in spec.fingerprint_ignore)
            source = spec.value_parameter()
            parameter = re.compile(source) if source is not None else None
            for route in spec.routes:
                route_spec = config.routes.get(route)
                canary = route_spec.canary if route_spec is not None else None
                binding = _Binding(
                    name, spec.version, patterns, ignore, spec.template == "auto", parameter,
                    canary.sticky if canary is not None else "none",
                )  # fmt: skip
                self._by_route.setdefault(route, binding)

    def resolve(
        self,
        route: str,
        endpoint: str,
        payload: Mapping[str, Any],
        headers: Sequence[tuple[bytes, bytes]],
    ) -> RuleMatch | None:
        """The rule and version of one request; None when its route has no rule set or the
        request has no system prompt."""
        binding = self._by_route.get(route)
        if binding is None:
            return None
        prompt = extract_system_prompt(endpoint, payload)
        split: list[PromptWords] = []

        def words_of(text: str) -> str:
            # Templates split the prompt anyway: its fingerprint comes with the words.
            split.append(
                _words(text, binding.ignore, binding.parameter)
                if len(text) <= WORDS_CACHED_CHARS
                else tokenize(text, binding.ignore, binding.parameter)
            )
            return split[0].fingerprint

        resolved = resolve_version(
            binding.version_setting, headers, prompt, binding.patterns, binding.ignore,
            words_of if binding.template else None,
        )  # fmt: skip
        if resolved is None:
            return None
        words = split[0] if split and resolved.source == "fingerprint" else None
        unit = None
        if binding.sticky != "none":
            key = sticky_key(binding.sticky, headers, payload)
            unit = unit_hash(key) if key is not None else None
        return RuleMatch(binding.name, resolved.version, prompt, words, unit)


@functools.lru_cache(maxsize=256)
def _words(
    prompt: str, ignore: tuple[re.Pattern[str], ...], parameter: re.Pattern[str] | None
) -> PromptWords:
    """`rule_template.tokenize`, remembered for the last few hundred prompts: a route's static
    prompt is split once, not per request."""
    return tokenize(prompt, ignore, parameter)


@dataclass(frozen=True, slots=True)
class VersionPolicy:
    """When a rule's versions open events (see the module docstring)."""

    min_requests: int = 3
    """`version_support.min_requests`: requests a variant or header version needs to open."""
    max_versions: int = 64
    """`max_versions`: fingerprint, template and header versions the rule keeps open."""
    named: frozenset[str] = frozenset()
    """The versions named under `versions:`: they open at once and are never capped."""
    min_units: int = 1
    """`version_support.min_units`: distinct units those requests come from (the config's
    default is 2; 1 here, for a policy made by hand, counts requests only)."""


def version_policies(config: MirrorgateConfig) -> dict[str, VersionPolicy]:
    """Each rule set's `VersionPolicy`, from its config."""
    policies = {}
    for name, spec in config.rules.items():
        support = spec.support()
        policies[name] = VersionPolicy(
            support.min_requests, spec.max_versions, frozenset(spec.versions), support.min_units
        )
    return policies


@dataclass(slots=True)
class _Pending:
    """A version seen but not open yet: how often, and its first request."""

    seen: int
    first_seen_at: datetime
    request_id: str
    route: str
    units: set[str] = field(default_factory=set)
    """Hashed units that sent it (at most `min_units` kept)."""


@dataclass(slots=True)
class _RuleState:
    open: set[str] = field(default_factory=set)
    """Versions with their event (named or not)."""
    capped: int = 0
    """How many of them count toward `max_versions` (those not named in config)."""
    pending: OrderedDict[str, _Pending] = field(default_factory=OrderedDict)
    """Versions still to recur, least recently seen first."""
    latest: tuple[str, str] | None = None
    """(version, system prompt) of the newest version opened; a template's prompt has its
    slots written `⟨label⟩`."""
    book: TemplateBook = field(default_factory=TemplateBook)
    """The templates learned from the rule's prompts (`template: auto`)."""


class RuleTracker:
    """Remembers the versions of each rule and persists each new one, once it recurs, as a
    rule-change event; bounded memory (see the module docstring)."""

    def __init__(
        self,
        events: RuleEventStore,
        keep_prompts: bool,
        metrics: GatewayMetrics,
        policies: Mapping[str, VersionPolicy] | None = None,
        values: RuleValues | None = None,
    ) -> None:
        self._events = events
        self.values = values if values is not None else RuleValues({})
        """Each version's value, shared with the analysis worker's phantom_rule checks."""
        self._retry = WriteRetry()
        self._metrics = metrics
        self._keep_prompts = keep_prompts
        self._policies = dict(policies or {})
        self._default = VersionPolicy()
        self._rules: dict[str, _RuleState] = {}
        self.tasks = TaskSet("rules")
        for rule in self._policies:  # exposed at 0 from the start, so that rate() sees the first
            metrics.rule_versions_overflow.labels(rule)

    def reconfigure(self, policies: Mapping[str, VersionPolicy]) -> None:
        """Follow `policies` from now on (a configuration reload); open versions stay open."""
        self._policies = dict(policies)
        for rule in self._policies:
            self._metrics.rule_versions_overflow.labels(rule)

    def load(self) -> None:
        """Read the versions already open, and their templates (at start, on a worker thread)."""
        for event in self._events.events():
            state = self._state(event.rule)
            if event.version not in state.open:
                state.open.add(event.version)
                if event.version not in self._policy(event.rule).named:
                    state.capped += 1
            if event.template is not None:
                stored = loads(event.template)
                if stored is not None:
                    state.book.restore(event.version, *stored)
            state.latest = (event.version, "")
            self.values.opened(
                event.rule, event.version, event.rule_value, known=event.rule_value is not None
            )
        recent = self._events.recent_versions() if self._rules else {}
        for rule, state in self._rules.items():
            policy = self._policy(rule)
            state.book.trim(policy.max_versions, policy.named, recent.get(rule, ()))
            cap = policy.max_versions
            if state.capped >= cap:
                log.warning(
                    "rule %s already has %d stored versions (max_versions %d): every new version "
                    "will be carried as %r, or retire an older one if it is a template; delete "
                    "old rows of rule_events or raise max_versions",
                    rule, state.capped, cap, OVERFLOW_VERSION,
                )  # fmt: skip

    def versions(self, rule: str) -> tuple[int, int]:
        """(open, pending) versions held in memory for `rule` (templates' included)."""
        state = self._rules.get(rule)
        if state is None:
            return (0, 0)
        size = state.book.size()
        return (len(state.open), len(state.pending) + size.pending + size.variants)

    def is_open(self, rule: str, version: str) -> bool:
        """Whether `version` has passed `version_support` (or is named): the only versions that
        become metric labels. Read from the analysis thread: a set lookup, no lock needed."""
        state = self._rules.get(rule)
        return state is not None and version in state.open

    def templates(self, rule: str) -> list[Root]:
        """The rule's open templates, most recently seen first (`GET /admin/rules/templates`)."""
        state = self._rules.get(rule)
        return state.book.roots() if state is not None else []

    def book(self, rule: str) -> TemplateBook | None:
        """The rule's template book (None: nothing seen yet)."""
        state = self._rules.get(rule)
        return state.book if state is not None else None

    def observe(self, match: RuleMatch, route: str, request_id: str) -> RuleMatch:
        """Note one request's version and answer the match it carries: `match` itself, with its
        template's version (`template: auto`), or with the version `overflow` when its rule has no
        room for another version. A version that opens here has its event persisted in the
        background."""
        state = self._state(match.rule)
        policy = self._policy(match.rule)
        now = datetime.now(UTC)
        unit = match.unit if match.unit is not None else unit_hash(request_id)
        if match.words is not None and match.version not in state.open:
            match = self._templated(state, policy, match, route, request_id, unit, now)
            self._learn_value(match)
            return match
        self._learn_value(match)
        version = match.version
        if version in state.open:
            if state.latest is not None and state.latest[0] == version and not state.latest[1]:
                state.latest = (version, match.system_prompt)
            return match
        if version in policy.named:
            self._open(state, match, _Pending(1, now, request_id, route), capped=False)
            return match
        if version == OVERFLOW_VERSION or state.capped >= policy.max_versions:
            self._metrics.rule_versions_overflow.labels(match.rule).inc()
            return replace(match, version=OVERFLOW_VERSION)
        pending = state.pending.pop(version, None) or _Pending(0, now, request_id, route)
        pending.seen += 1
        if len(pending.units) < policy.min_units:
            pending.units.add(unit)
        if pending.seen >= policy.min_requests and len(pending.units) >= policy.min_units:
            self._open(state, match, pending, capped=True)
            return match
        state.pending[version] = pending
        if len(state.pending) > PENDING_MAX:
            state.pending.popitem(last=False)
        return match

    def _learn_value(self, match: RuleMatch) -> None:
        version = match.version
        if version != OVERFLOW_VERSION and not self.values.knows(match.rule, version):
            self.values.learn(
                match.rule, version, self.values.extract(match.rule, match.system_prompt)
            )

    def _templated(
        self,
        state: _RuleState,
        policy: VersionPolicy,
        match: RuleMatch,
        route: str,
        request_id: str,
        unit: str,
        now: datetime,
    ) -> RuleMatch:
        """The version of a request whose rule learns templates (see `rule_templates`)."""
        words = match.words
        if words is None:  # the caller checked; for the type checker
            return match
        uncapped = policy.named
        seen = state.book.see(
            words, unit, First(now, request_id, route), policy.min_requests, policy.min_units,
            policy.max_versions, uncapped, per_request=match.unit is None,
        )  # fmt: skip
        carried = replace(match, version=seen.version)
        if seen.learned is not None:
            root = seen.learned
            update = functools.partial(
                self._events.set_template,
                match.rule,
                root.version,
                dumps(root.template, root.protected),
            )
            self.tasks.spawn(self._retry.call_async(update), f"template:{match.rule}")
        opened = seen.opened
        if opened is None:
            return carried
        if seen.retired is not None:
            state.open.discard(seen.retired)
            state.capped -= 1
        if seen.returning:
            state.open.add(seen.version)
            state.capped += 1
            return carried
        if seen.version in state.open:
            return carried  # known (stored) already: no new event
        first = _Pending(opened.requests, opened.first.seen_at, opened.first.request_id,
                         opened.first.route)  # fmt: skip
        if not first.request_id:
            first = _Pending(1, now, request_id, route)
        self._open(
            state, replace(carried, system_prompt=opened.rendered or match.system_prompt), first,
            capped=seen.version not in policy.named,
            template=dumps(opened.template, opened.protected), prompt=match.system_prompt,
        )  # fmt: skip
        return carried

    def _state(self, rule: str) -> _RuleState:
        state = self._rules.get(rule)
        if state is None:
            state = self._rules[rule] = _RuleState()
        return state

    def _policy(self, rule: str) -> VersionPolicy:
        return self._policies.get(rule, self._default)

    def _open(
        self,
        state: _RuleState,
        match: RuleMatch,
        first: _Pending,
        capped: bool,
        template: str | None = None,
        prompt: str | None = None,
    ) -> None:
        """Open `match.version`: its event, stored in the background. `match.system_prompt` is
        what the diff shows (a template's, with its slots); `prompt` the request's own, when it
        differs (its value is read from it)."""
        previous = state.latest
        diff = None
        if self._keep_prompts and previous is not None and previous[1]:
            diff = system_prompt_diff(previous[1], match.system_prompt)
        value = self.values.extract(
            match.rule, prompt if prompt is not None else match.system_prompt
        )
        event = RuleEvent(
            rule=match.rule,
            version=match.version,
            previous_version=previous[0] if previous else None,
            first_seen_at=first.first_seen_at,
            request_id=first.request_id,
            route=first.route,
            prompt_diff=diff,
            rule_value=value,
            template=template,
        )
        self.values.opened(match.rule, match.version, value)
        state.open.add(match.version)
        state.capped += int(capped)
        state.latest = (match.version, match.system_prompt)
        self._metrics.rule_changes.labels(match.rule).inc()
        self.tasks.spawn(self._persist_until_stored(event), f"event:{match.rule}")
        log.info(  # header versions are the client's words: redacted, and at most one line each
            "rule change: %s %s -> %s",
            match.rule,
            redact(event.previous_version or "None"),
            redact(match.version),
        )

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
