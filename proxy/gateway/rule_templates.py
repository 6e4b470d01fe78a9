"""The templates a rule has learned from its system prompts, and which of them are versions.

With `rules.<r>.template: auto` (the default) a request whose version would be a fingerprint gets
the version of the *template* its system prompt fills instead (`analyzers.rule_template`): a
prompt with a customer's name in it is one version, not one per customer. A `TemplateBook` holds
one rule's templates:

- **roots**: templates that are versions (*open*: they have their rule-change event) or may become
  one (*pending*). A prompt that fills an open root carries its version.
- **variants** of a root: a prompt that does not fill any root but differs from one in a few short
  regions (`rule_template.align`) is a variant of it, keyed by what it holds in those regions.
- **slots**: a region of a root becomes a slot of it once variants have held `SLOT_VALUES`
  different fillings there (the root's own words not counted), each sent by a different unit:
  one client sending many fillings counts once.
  Then every variant of that root is dropped (a variant that differed only there fills the root
  now; the others come back on their next request). A region can never become a slot where the
  rule's declared value lies (its value parameter's group `value`), where the variant only adds or
  removes words, nor where a variant of the root became a version of its own.
- **support**: a pending root or a variant becomes a version — its own root, open, with its event
  — once it has carried `min_requests` requests from `min_units` different units
  (`rules.<r>.version_support`). A unit is the route's sticky key (hashed), else the request.

So one customer, however many requests they send, can neither make a version (one unit) nor a
slot (one unit), and a real edit of the prompt — a value changed, a sentence added — opens its
version after `min_requests` requests from `min_units` users. Until it does, a request carries its
variant's would-be version (`fp-…`) in its record, and the metric label `pending`.

Ids are functions of the template (`rule_template.template_id`), so every replica that learns the
same template names it alike, and the open templates are stored with their events
(`rule_events.template`) and read back at start: a restarted gateway gives the same prompt the
same version (at most `max_versions` are kept in memory, those in use first: `trim`). A
template that learns a slot while open keeps its id; the store is told the new template.

Bounded whatever the traffic: at most `ROOTS_PENDING_MAX` pending roots and `VARIANTS_MAX`
variants per rule (the least recently seen go first, counted in `evicted`), the open roots, of
which at most `max_versions` not named in config: opening one more retires the least recently
seen (not the newest): it stays stored, and comes back without a new event if it is seen again.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from analyzers.rule_template import (
    PromptWords,
    Region,
    Template,
    align,
    generalise,
    matches,
    render,
    renumbering,
    slot_labels,
    substitute,
    template_id,
)
from analyzers.rule_version import FINGERPRINT_PREFIX

SLOT_VALUES = 3
"""Different fillings, from as many different units, that make a region a slot."""
ROOTS_PENDING_MAX = 64
"""Pending roots (prompts that are no variant of a known template) kept per rule."""
VARIANTS_MAX = 1024
"""Variants of roots kept per rule."""
RETIRED_MAX = 4096
"""Ids of retired versions remembered per rule (so one that comes back opens no new event)."""
ALIGN_CANDIDATES = 4
"""Roots a prompt that fills none is compared with (those closest to it in length)."""
MAJORITY = 2 / 3
"""Without a sticky key, the share of its root's traffic a variant must carry to open."""
PER_REQUEST_MIN = 10
"""Without a sticky key, the requests a variant must carry to open (at least): long enough for
a frequent customer's share to show it is one customer among others."""
UNITS_KEPT = 64
"""Unit hashes kept per template or variant: support needs at most this many (`min_units`)."""
REGIONS_MAX = 64
"""Regions of one root whose fillings are counted."""
FILLINGS_KEPT = 16
"""Units whose fillings are counted per region."""


def unit_hash(key: str) -> str:
    """A sticky key (or a request id) as templates count it: 8 bytes of BLAKE2b, so that no
    client's key is kept."""
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


@dataclass(slots=True)
class First:
    """The first request of a template or variant: its event is dated at and names it."""

    seen_at: datetime
    request_id: str
    route: str


@dataclass(slots=True)
class _Fillings:
    """What variants of a root held in one of its regions, per unit that sent them."""

    by_unit: dict[str, set[tuple[str | None, ...]]] = field(default_factory=dict)
    """Each unit (at most `FILLINGS_KEPT`) → the fillings it sent there (their words' digests;
    the root's own words not counted; at most `SLOT_VALUES` each)."""


@dataclass(slots=True)
class Root:
    """A template that is a version or may become one."""

    template: Template
    protected: frozenset[int]
    version: str
    """`fp-` and its id: fixed once open, else what it would open as."""
    first: First
    open: bool = False
    requests: int = 0
    units: set[str] = field(default_factory=set)
    labels: tuple[str, ...] = ()
    """A name for each slot (from the word before it)."""
    rendered: str = ""
    """The last prompt it was opened or learned from, with its slots as `⟨label⟩`, for diffs."""
    fillings: dict[tuple[int, int], _Fillings] = field(default_factory=dict)
    """Region (start, end) → what variants held there instead of the root's own words."""
    generation: int = 0
    """Grows when the template learns a slot: variants of an older generation are dropped."""
    family: int = 0
    """Requests of it and of its variants."""


@dataclass(slots=True)
class Variant:
    """A prompt that differs from a root in a few regions."""

    root: Root
    generation: int
    regions: tuple[Region, ...]
    template: Template
    version: str
    first: First
    family_start: int = 0
    """Its root's `family` when it was first seen."""
    requests: int = 0
    units: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class Seen:
    """What one request's prompt is, for the tracker."""

    version: str
    open: bool
    """Whether `version` is open (it had its event before this request, or opens with it)."""
    opened: Root | None = None
    """The root this request opened (its event to store), if any."""
    learned: Root | None = None
    """An open root that learned a slot with this request (its stored template to update)."""
    retired: str | None = None
    """The version retired to make room for `opened`."""
    returning: bool = False
    """`opened` is a version retired before: it is stored, so it opens no new event."""


@dataclass(frozen=True, slots=True)
class BookSize:
    """What a book holds, for `GET /admin/rules/templates` and the tests."""

    open: int
    pending: int
    variants: int
    evicted: int
    retired: int


class TemplateBook:
    """One rule's templates (see the module docstring). Not thread-safe: the event loop's."""

    def __init__(self) -> None:
        self._open: OrderedDict[str, Root] = OrderedDict()
        """Open roots by version, least recently seen first."""
        self._pending: OrderedDict[str, Root] = OrderedDict()
        """Pending roots by their would-be version, least recently seen first."""
        self._variants: OrderedDict[tuple[object, ...], Variant] = OrderedDict()
        self._retired: OrderedDict[str, None] = OrderedDict()
        self.evicted = 0
        """Pending roots and variants dropped for room."""
        self.retired_count = 0

    # --- reading -------------------------------------------------------------------------------

    def size(self) -> BookSize:
        return BookSize(
            len(self._open), len(self._pending), len(self._variants), self.evicted,
            self.retired_count,
        )  # fmt: skip

    def roots(self) -> list[Root]:
        """The open roots, most recently seen first."""
        return list(reversed(self._open.values()))

    def knows(self, version: str) -> bool:
        """Whether `version` is an open root of this book."""
        return version in self._open

    # --- writing -------------------------------------------------------------------------------

    def restore(self, version: str, template: Template, protected: frozenset[int]) -> None:
        """An open root read back from the store (at start)."""
        root = Root(template, protected, version, First(datetime.min, "", ""), open=True)
        root.labels = tuple(f"slot{k + 1}" for k in range(template.count(None)))
        self._open[version] = root

    def trim(
        self, max_open: int, uncapped: frozenset[str] = frozenset(), recent: Sequence[str] = ()
    ) -> None:
        """Retire open roots past `max_open` (not named in config) after `restore`, so that a
        store holding many versions does not fill memory at start: those in `recent` (versions
        the newest exchanges carried, most recent first) are kept first, then the newest."""
        rank = {version: k for k, version in enumerate(recent)}
        capped = [v for v in self._open if v not in uncapped]
        order = sorted(range(len(capped)), key=lambda k: (rank.get(capped[k], len(rank)), -k))
        keep = {capped[k] for k in order[:max_open]}
        for victim in [v for v in capped if v not in keep]:
            del self._open[victim]
            self._retired[victim] = None
            self._bound(self._retired, RETIRED_MAX, count=False)
            self.retired_count += 1

    def update_labels(self, root: Root, prompt: PromptWords) -> None:
        if not root.rendered and matches(root.template, prompt.digests):
            root.labels = tuple(slot_labels(root.template, prompt))
            root.rendered = render(root.template, prompt, root.labels)

    def see(
        self,
        prompt: PromptWords,
        unit: str,
        first: First,
        min_requests: int,
        min_units: int,
        max_open: int,
        uncapped: frozenset[str] = frozenset(),
        per_request: bool = False,
    ) -> Seen:
        """Count one request (`unit`: its hashed unit) and say what it carries. `per_request`:
        the unit is the request itself (no sticky key): then a variant also needs to have
        carried most of its root's traffic since it appeared (`MAJORITY`), over at least
        `PER_REQUEST_MIN` requests — the most frequent customer's name is a minority, a rule
        change is not."""
        root = self._filled(prompt)
        if root is not None:
            self._count(root, unit)
            if root.open:
                self.update_labels(root, prompt)
                return Seen(root.version, True)
            if _supported(root.requests, root.units, min_requests, min_units):
                return self._open_root(root, prompt, max_open, uncapped)
            return Seen(root.version, False)
        found = self._variant_of(prompt)
        if found is None:
            root = self._new_pending(prompt, first)
            self._count(root, unit)
            if _supported(root.requests, root.units, min_requests, min_units):
                return self._open_root(root, prompt, max_open, uncapped)
            return Seen(root.version, False)
        parent, regions = found
        key = (
            id(parent), parent.generation,
            tuple((r.start, r.end, prompt.digests[r.p_start : r.p_end]) for r in regions),
        )  # fmt: skip
        variant = self._variants.pop(key, None)
        if variant is None:
            template = substitute(parent.template, regions, prompt)
            version = FINGERPRINT_PREFIX + template_id(template, prompt)
            variant = Variant(
                parent, parent.generation, regions, template, version, first, parent.family
            )
        self._variants[key] = variant
        self._bound(self._variants, VARIANTS_MAX)
        parent.family += 1
        variant.requests += 1
        _add(variant.units, unit)
        learned = self._learn(parent, variant, regions, prompt, unit)
        if learned:
            self._count(parent, unit)
            if parent.open:
                parent.labels = tuple(slot_labels(parent.template, prompt))
                parent.rendered = render(parent.template, prompt, parent.labels)
                return Seen(parent.version, True, learned=parent)
            parent.version = FINGERPRINT_PREFIX + template_id(parent.template, prompt)
            if _supported(parent.requests, parent.units, min_requests, min_units):
                return self._open_root(parent, prompt, max_open, uncapped)
            return Seen(parent.version, False)
        share = variant.requests / max(1, parent.family - variant.family_start)
        if _supported(variant.requests, variant.units, min_requests, min_units) and (
            not per_request or (share > MAJORITY and variant.requests >= PER_REQUEST_MIN)
        ):
            self._variants.pop(key, None)
            # Where a variant became a version, its parent never gets a slot.
            parent.protected = parent.protected | {
                i for r in variant.regions for i in range(r.start, r.end)
            }
            for r in variant.regions:
                parent.fillings.pop((r.start, r.end), None)
            root = Root(
                variant.template, _shifted(parent.protected, variant.regions), variant.version,
                variant.first, requests=variant.requests, units=set(variant.units),
            )  # fmt: skip
            return self._open_root(root, prompt, max_open, uncapped)
        return Seen(variant.version, False)

    # --- the steps -----------------------------------------------------------------------------

    def _filled(self, prompt: PromptWords) -> Root | None:
        """The root `prompt` fills: an open one first (most recently seen first), then pending."""
        for table in (self._open, self._pending):
            for version in reversed(table):
                root = table[version]
                if matches(root.template, prompt.digests):
                    table.move_to_end(version)
                    return root
        return None

    def _variant_of(self, prompt: PromptWords) -> tuple[Root, tuple[Region, ...]] | None:
        """The root `prompt` is a variant of (the one it differs from in the fewest words; an
        open one, then the most recently seen, on a tie), with the regions; None if none."""
        size = len(prompt.digests)
        roots = [*reversed(self._open.values()), *reversed(self._pending.values())]
        ranked = sorted(range(len(roots)), key=lambda k: (abs(len(roots[k].template) - size), k))
        best: tuple[tuple[int, int, int], Root, tuple[Region, ...]] | None = None
        for k in sorted(ranked[:ALIGN_CANDIDATES]):
            root = roots[k]
            regions = align(root.template, root.protected, prompt)
            if not regions:
                continue
            differ = sum(max(r.end - r.start, r.p_end - r.p_start) for r in regions)
            order = (differ, 0 if root.open else 1, k)
            if best is None or order < best[0]:
                best = (order, root, regions)
        return None if best is None else (best[1], best[2])

    def _learn(
        self,
        parent: Root,
        variant: Variant,
        regions: tuple[Region, ...],
        prompt: PromptWords,
        unit: str,
    ) -> bool:
        """Count the fillings of its parent's regions (`regions`: where `prompt` differs from
        it); make slots of those that have enough; True when the parent's template changed."""
        spans: list[tuple[int, int]] = []
        for region in regions:
            if not region.slottable:
                continue
            span = (region.start, region.end)
            counted = parent.fillings.get(span)
            if counted is None:
                if len(parent.fillings) >= REGIONS_MAX:
                    continue
                counted = parent.fillings[span] = _Fillings()
            filling = prompt.digests[region.p_start : region.p_end]
            held = counted.by_unit.get(unit)
            if held is None and len(counted.by_unit) < FILLINGS_KEPT:
                held = counted.by_unit[unit] = set()
            if held is not None:
                _add(held, filling, SLOT_VALUES)
            if _distinct_senders(counted) >= SLOT_VALUES:
                spans.append(span)
        if not spans:
            return False
        moved = renumbering(len(parent.template), spans)
        parent.template, parent.protected = generalise(parent.template, parent.protected, spans)
        # What other regions have seen still counts: renumbered, unless a slot took part of one.
        kept: dict[tuple[int, int], _Fillings] = {}
        for (start, end), counted in parent.fillings.items():
            if all(i in moved for i in range(start, end)):
                kept[(moved[start], moved[end - 1] + 1)] = counted
        parent.fillings = kept
        parent.generation += 1
        for key in [k for k, v in self._variants.items() if v.root is parent]:
            dropped = self._variants.pop(key)
            if dropped is not variant and matches(parent.template, dropped.template):
                # It differed only where the slot is now: its requests are the parent's.
                parent.requests += dropped.requests
                for sender in dropped.units:
                    _add(parent.units, sender)
        return matches(parent.template, prompt.digests)

    def _new_pending(self, prompt: PromptWords, first: First) -> Root:
        template = prompt.digests
        version = FINGERPRINT_PREFIX + template_id(template, prompt)
        root = Root(template, prompt.protected, version, first)
        self._pending[version] = root
        self._bound(self._pending, ROOTS_PENDING_MAX)
        return root

    def _count(self, root: Root, unit: str) -> None:
        root.requests += 1
        root.family += 1
        _add(root.units, unit)

    def _open_root(
        self, root: Root, prompt: PromptWords, max_open: int, uncapped: frozenset[str]
    ) -> Seen:
        for table in (self._pending,):
            for version, held in list(table.items()):
                if held is root:
                    del table[version]
        root.version = FINGERPRINT_PREFIX + template_id(root.template, prompt)
        root.open = True
        root.labels = tuple(slot_labels(root.template, prompt))
        root.rendered = render(root.template, prompt, root.labels)
        retired = None
        capped = [v for v in self._open if v not in uncapped]
        if len(capped) >= max_open and capped:
            newest = next(reversed(self._open)) if self._open else None
            victim = next((v for v in capped if v != newest), capped[0])
            del self._open[victim]
            self._retired[victim] = None
            self._bound(self._retired, RETIRED_MAX, count=False)
            self.retired_count += 1
            retired = victim
        self._open[root.version] = root
        returning = self._retired.pop(root.version, 0) is None
        return Seen(root.version, True, opened=root, retired=retired, returning=returning)

    def _bound(self, table: OrderedDict[Any, Any], limit: int, count: bool = True) -> None:
        while len(table) > limit:
            table.popitem(last=False)
            if count:
                self.evicted += 1


def _distinct_senders(counted: _Fillings) -> int:
    """How many different fillings have each a different unit that sent it (a matching of units
    to fillings, at most `SLOT_VALUES`): one client sending many fillings counts once."""
    units = sorted(counted.by_unit.values(), key=len)
    best = 0

    def extend(k: int, used: frozenset[tuple[str | None, ...]], size: int) -> None:
        nonlocal best
        best = max(best, size)
        if best >= SLOT_VALUES or k == len(units) or size + len(units) - k <= best:
            return
        for filling in units[k]:
            if filling not in used:
                extend(k + 1, used | {filling}, size + 1)
                if best >= SLOT_VALUES:
                    return
        extend(k + 1, used, size)

    extend(0, frozenset(), 0)
    return best


def _supported(requests: int, units: set[str], min_requests: int, min_units: int) -> bool:
    return requests >= min_requests and len(units) >= min_units


def _add(held: set[Any], item: Any, limit: int = UNITS_KEPT) -> None:
    if len(held) < limit:
        held.add(item)


def _shifted(protected: frozenset[int], regions: tuple[Region, ...]) -> frozenset[int]:
    """The parent's protected elements renumbered into a variant's template (its regions
    replaced by the variant's words, all of which are protected: they made a version)."""
    out: set[int] = set()
    offset = 0
    cuts = sorted(regions, key=lambda r: r.start)
    at = 0
    for region in cuts:
        out.update(i + offset for i in protected if at <= i < region.start)
        out.update(
            range(region.start + offset, region.start + offset + region.p_end - region.p_start)
        )
        offset += (region.p_end - region.p_start) - (region.end - region.start)
        at = region.end
    out.update(i + offset for i in protected if i >= at)
    return frozenset(out)
