"""The value each rule version's system prompt carries, shared by the rule tracker and the checks.

A rule with a value parameter (`probes.parameter`, or a phantom_rule check's own `parameter`: a
regex with a named group `value`) has a value per version: `max_weight = 100` in v1's prompt, 150
in v2's. The `RuleTracker` extracts it when it opens a version (and persists it with the event,
`rule_events.rule_value`), reads the stored ones back at start, and learns the value of any other
version (a pending fingerprint, a named version whose stored value is missing) from its first
request's prompt. The analysis worker asks `context` for a version's value and the values of the
versions opened before it, to bind its phantom_rule checks (`analyzers.phantom`).

Thread-safe: the tracker writes on the event loop, the analysis worker reads on its thread. Each
rule's `revision` grows whenever something it answers changes, so readers may cache by it.
Bounded: a rule holds the values of its open versions (themselves bounded by `max_versions`) and
of at most `LEARNED_MAX` other versions, the least recently learned going first.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field

from analyzers.phantom import rule_value
from proxy.config import MirrorgateConfig

LEARNED_MAX = 1024
"""Values of versions not (yet) open kept per rule."""


@dataclass(frozen=True, slots=True)
class VersionValues:
    """What a phantom_rule check of one version needs to know."""

    revision: int
    """The rule's revision when this was read (cache key)."""
    known: bool
    """Whether the version's value has been found (False: no request of it seen yet)."""
    current: str | None
    """The version's value (None: its system prompt carries none, or not known)."""
    earlier: tuple[tuple[str, str | None], ...]
    """(version, value) of the versions opened before it, oldest first (all open versions for
    a version that is not open itself)."""


@dataclass(slots=True)
class _Rule:
    parameter: re.Pattern[str]
    order: list[str] = field(default_factory=list)
    """Open versions, in the order they opened."""
    values: dict[str, str | None] = field(default_factory=dict)
    """Known values of open versions."""
    learned: OrderedDict[str, str | None] = field(default_factory=OrderedDict)
    """Known values of versions not open, least recently learned first."""
    revision: int = 0


class RuleValues:
    """Per rule, each version's value (see the module docstring)."""

    def __init__(self, parameters: Mapping[str, re.Pattern[str]]) -> None:
        self._lock = threading.Lock()
        self._rules = {rule: _Rule(pattern) for rule, pattern in parameters.items()}

    @classmethod
    def from_config(cls, config: MirrorgateConfig) -> RuleValues:
        """One entry per rule set that has a value parameter."""
        parameters = {}
        for name, rule in config.rules.items():
            source = rule.value_parameter()
            if source is not None:
                parameters[name] = re.compile(source)
        return cls(parameters)

    def reconfigure(self, config: MirrorgateConfig) -> None:
        """Follow a reloaded configuration: a rule whose value parameter is unchanged keeps what
        it knows; a new rule, or one whose parameter changed, starts empty (each version's value
        is learned again from its next request); a rule that lost its parameter is dropped."""
        fresh = RuleValues.from_config(config)
        with self._lock:
            rules = {}
            for rule, entry in fresh._rules.items():
                old = self._rules.get(rule)
                if old is not None and old.parameter.pattern == entry.parameter.pattern:
                    rules[rule] = old
                else:
                    entry.revision = (old.revision + 1) if old is not None else 0
                    if old is not None:
                        entry.order = list(old.order)  # the versions and their order stay
                    rules[rule] = entry
            self._rules = rules

    def tracks(self, rule: str) -> bool:
        """Whether `rule` has a value parameter."""
        return rule in self._rules

    def extract(self, rule: str, system_prompt: str) -> str | None:
        """The rule's value in `system_prompt` (None: not tracked, or no value there)."""
        entry = self._rules.get(rule)
        return None if entry is None else rule_value(entry.parameter, system_prompt)

    def knows(self, rule: str, version: str) -> bool:
        """Whether the value of (rule, version) is known (always True for untracked rules)."""
        entry = self._rules.get(rule)
        if entry is None:
            return True
        with self._lock:
            return version in entry.values or version in entry.learned

    def opened(self, rule: str, version: str, value: str | None, known: bool = True) -> None:
        """`version` opened (or was read back from the store) with `value`; `known` False
        when the value is still to be learned (a stored event without one)."""
        entry = self._rules.get(rule)
        if entry is None:
            return
        with self._lock:
            if version not in entry.values and version not in entry.order:
                entry.order.append(version)
            was_learned = version in entry.learned
            learned = entry.learned.pop(version, None)
            if known:
                entry.values[version] = value
            elif version not in entry.values and was_learned:
                entry.values[version] = learned
            entry.revision += 1

    def learn(self, rule: str, version: str, value: str | None) -> None:
        """The value of `version` as its request's prompt carries it, for a version whose value
        was not known."""
        entry = self._rules.get(rule)
        if entry is None:
            return
        with self._lock:
            if version in entry.order:
                entry.values[version] = value
            else:
                entry.learned[version] = value
                entry.learned.move_to_end(version)
                if len(entry.learned) > LEARNED_MAX:
                    entry.learned.popitem(last=False)
            entry.revision += 1

    def revision(self, rule: str) -> int:
        """The rule's revision (0 for an untracked rule)."""
        entry = self._rules.get(rule)
        if entry is None:
            return 0
        with self._lock:
            return entry.revision

    def context(self, rule: str, version: str) -> VersionValues | None:
        """What a check of (rule, version) needs; None for an untracked rule."""
        entry = self._rules.get(rule)
        if entry is None:
            return None
        with self._lock:
            if version in entry.order:
                before = entry.order[: entry.order.index(version)]
            else:
                before = list(entry.order)
            known = version in entry.values or version in entry.learned
            current = entry.values.get(version, entry.learned.get(version))
            earlier = tuple((v, entry.values.get(v)) for v in before)
            return VersionValues(entry.revision, known, current, earlier)
