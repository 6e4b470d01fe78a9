"""`GET /admin/rules/templates`: each rule's versions and the templates learned from its system
prompts (`proxy.gateway.rule_templates`), with their slots — what `mirrorgate rules` prints.

Per rule: its settings (`template`, `version_support`, `max_versions`), what its template book
holds in this replica's memory (open templates, pending ones, variants, how many were evicted or
retired), and per stored version — newest first — when it opened, its traffic, and its template:
the number of fixed words and the slots, each named by the word before it (`⟨customer⟩`), and,
unless `store.bodies` is `none`, the template's text with its slots in place (redacted under
`redacted`, like the stored prompt diffs). A version opened by
another replica, or before a restart, has its stored template (its slots are then named `slot1`,
`slot2`, … until this replica sees a request of it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from analyzers.rule_template import loads
from proxy.config import RuleSpec
from proxy.gateway import RuleTracker
from proxy.store import RuleEvent, VersionTraffic, redact


def rule_templates(
    events: Sequence[RuleEvent],
    traffic: Mapping[tuple[str, str], VersionTraffic],
    tracker: RuleTracker | None,
    settings: Mapping[str, RuleSpec],
    keep_text: bool,
    only: str | None = None,
    redact_text: bool = False,
) -> dict[str, Any]:
    """The endpoint's answer (see the module docstring); `only`: one rule; `redact_text`: pass
    the templates' texts through the store's redactor (`store.bodies: redacted`)."""
    names = list(dict.fromkeys([*settings, *(e.rule for e in events)]))
    if only is not None:
        names = [n for n in names if n == only]
    rules = []
    for name in names:
        spec = settings.get(name)
        roots = {r.version: r for r in tracker.templates(name)} if tracker is not None else {}
        book = tracker.book(name) if tracker is not None else None
        size = book.size() if book is not None else None
        versions = []
        for event in sorted(
            (e for e in events if e.rule == name), key=lambda e: e.first_seen_at, reverse=True
        ):
            seen = traffic.get((name, event.version))
            root = roots.get(event.version)
            template: dict[str, Any] | None = None
            if root is not None:
                template = {
                    "fixed_words": sum(1 for e in root.template if e is not None),
                    "slots": [f"⟨{label}⟩" for label in root.labels],
                    "text": _shown(root.rendered, keep_text, redact_text),
                }
            elif event.template is not None and (stored := loads(event.template)) is not None:
                slots = stored[0].count(None)
                template = {
                    "fixed_words": len(stored[0]) - slots,
                    "slots": [f"⟨slot{k + 1}⟩" for k in range(slots)],
                    "text": None,
                }
            versions.append(
                {
                    "version": event.version,
                    "previous_version": event.previous_version,
                    "named": spec is not None and event.version in spec.versions,
                    "open_here": tracker is not None and tracker.is_open(name, event.version),
                    "changed_at": event.first_seen_at.isoformat(),
                    "exchanges": seen.exchanges if seen else 0,
                    "last_seen": seen.last_seen.isoformat() if seen else None,
                    "rule_value": event.rule_value,
                    "template": template,
                }
            )
        support = spec.support() if spec is not None else None
        rules.append(
            {
                "rule": name,
                "configured": spec is not None,
                "template": spec.template if spec is not None else None,
                "version_support": (
                    {"min_requests": support.min_requests, "min_units": support.min_units}
                    if support is not None
                    else None
                ),
                "max_versions": spec.max_versions if spec is not None else None,
                "held": (
                    {
                        "open_templates": size.open,
                        "pending_templates": size.pending,
                        "variants": size.variants,
                        "evicted": size.evicted,
                        "retired": size.retired,
                    }
                    if size is not None
                    else None
                ),
                "versions": versions,
            }
        )
    return {"rules": rules}


def _shown(text: str, keep: bool, redacted: bool) -> str | None:
    if not keep or not text:
        return None
    return redact(text) if redacted else text
