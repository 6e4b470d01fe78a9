"""The outbound alert: what mirrorgate tells humans and other systems, and its generic JSON form."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal, get_args

Severity = Literal["critical", "warning", "info"]
AlertKind = Literal[
    "rollback",
    "rule_regression",
    "verdict_fail",
    "step_held",
    "experiment_arm_stopped",
    "experiment_srm",
]
RollbackTarget = Literal["primary", "fallback"]
"""Kinds are a closed set so that the `kind` metric label stays bounded; add new kinds here."""

WEBHOOK_SCHEMA_VERSION = 1
MAX_EXAMPLE_REQUEST_IDS = 5


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert, validated on construction. Equal alerts have equal `fingerprint`s."""

    kind: AlertKind
    """What happened: `rollback` (traffic was moved back), `rule_regression` (a candidate fails a
    rule version the primary passes), `verdict_fail` (an analysis metric failed), `step_held`
    (a rollout step has held past `canary.max_hold_s`: some metric cannot pass yet),
    `experiment_arm_stopped` (a guardrail breach stopped an experiment arm; `target` is the arm's
    model, `check` the guardrail), `experiment_srm` (the experiment's units do not follow its
    weights: its assignment is broken)."""
    route: str
    """The route's config name."""
    target: str
    """The candidate model's config name (the arm being judged or rolled back)."""
    severity: Severity
    summary: str
    """One human sentence; free text, so it goes to annotations and message bodies, never labels."""
    starts_at: datetime
    """When the condition began; must be timezone-aware."""
    rule: str | None = None
    """The rule's config name, when a rule check is involved."""
    rule_version: str | None = None
    """The rule version (a `versions` key or the automatic prompt fingerprint)."""
    check: str | None = None
    """The failing check's config name (or the failing analysis metric)."""
    evidence: Mapping[str, float] = field(default_factory=dict)
    """Numbers behind the decision, e.g. `{"candidate_pass_rate": 0.8, "n": 120}`."""
    example_request_ids: tuple[str, ...] = ()
    """Up to five `x-mirrorgate-request-id`s that show the failure; extra ids are dropped."""
    generator_url: str | None = None
    """A link back to mirrorgate (admin status page), sent as Alertmanager's `generatorURL`."""
    rollout_id: str | None = None
    """The rollout the alert is about (None: not about a rollout). Part of the fingerprint, so
    the same condition in a new rollout is a new alert and is not deduplicated."""
    rolled_back_to: RollbackTarget | None = None
    """For a rollback: where the route's traffic went, `primary` (the canary at 0 %) or
    `fallback` (the whole route). Part of the fingerprint, so a rollback to the primary followed
    by one to the fallback alerts twice."""

    def __post_init__(self) -> None:
        if self.kind not in get_args(AlertKind):
            raise ValueError(f"kind: must be one of {get_args(AlertKind)}, got {self.kind!r}")
        if self.severity not in get_args(Severity):
            raise ValueError(
                f"severity: must be one of {get_args(Severity)}, got {self.severity!r}"
            )
        for name in ("route", "target"):
            if not getattr(self, name):
                raise ValueError(f"{name}: must not be empty")
        if self.starts_at.tzinfo is None or self.starts_at.utcoffset() is None:
            raise ValueError("starts_at: must be timezone-aware")
        evidence: dict[str, float] = {}
        for key, value in self.evidence.items():
            number_like = isinstance(value, int | float) and not isinstance(value, bool)
            if not number_like or not math.isfinite(value):
                raise ValueError(f"evidence.{key}: must be a finite number, got {value!r}")
            evidence[str(key)] = value
        # Frozen and slotted: bypass the frozen __setattr__ once, to store normalised copies.
        object.__setattr__(self, "evidence", MappingProxyType(evidence))
        ids = tuple(str(i) for i in self.example_request_ids)[:MAX_EXAMPLE_REQUEST_IDS]
        object.__setattr__(self, "example_request_ids", ids)

    @property
    def fingerprint(self) -> str:
        """Stable identity of the condition: (kind, route, target, rule, rule_version, check,
        and rollout_id and rolled_back_to when set).

        Deliberately excludes summary, evidence and time, so that the same condition raised again
        (with fresher numbers) in the same rollout deduplicates, while a new rollout's alert does
        not. 16 hex digits, like Alertmanager's fingerprints."""
        key = [self.kind, self.route, self.target, self.rule, self.rule_version, self.check]
        if self.rollout_id is not None:  # alerts about no rollout keep their identity
            key.append(self.rollout_id)
        if self.rolled_back_to is not None:
            key.append(self.rolled_back_to)
        digest = hashlib.sha256(json.dumps(key, separators=(",", ":")).encode())
        return digest.hexdigest()[:16]

    @property
    def rule_ref(self) -> str | None:
        """`rule@version` (or just `rule`), for messages."""
        if self.rule is None:
            return None
        return f"{self.rule}@{self.rule_version}" if self.rule_version else self.rule

    def to_webhook_json(self) -> dict[str, Any]:
        """The generic webhook body, schema version 1 (docs/alerts.md). Keys are always present;
        absent optional values are null."""
        return {
            "version": WEBHOOK_SCHEMA_VERSION,
            "source": "mirrorgate",
            "fingerprint": self.fingerprint,
            "kind": self.kind,
            "severity": self.severity,
            "route": self.route,
            "target": self.target,
            "rule": self.rule,
            "rule_version": self.rule_version,
            "check": self.check,
            "rollout_id": self.rollout_id,
            "rolled_back_to": self.rolled_back_to,
            "summary": self.summary,
            "evidence": dict(self.evidence),
            "example_request_ids": list(self.example_request_ids),
            "starts_at": self.starts_at.isoformat(),
            "generator_url": self.generator_url,
        }
