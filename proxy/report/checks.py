"""Rule checks by rule version, for `mirrorgate report`.

Every verdict (`proxy.core.CheckRecord`) belongs to one version of one rule set. Per version,
each check's verdicts are summarised per arm · target (pass rate with its Wilson interval, fails
and errors) and each candidate's pass rate is compared with the primary's on the same version
(Newcombe's interval of the difference): a rule change is exactly when a candidate that still
follows the old rule starts to fall behind.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from datetime import datetime

from analyzers.summary import CheckSummary, newcombe_difference
from proxy.core import Arm, CheckRecord

from .model import CheckArmReport, RuleChange, RuleVersionReport, arm_key

_Version = tuple[str, str]
"""(rule, version)."""


def build_rule_versions(
    route: str,
    checks: Sequence[CheckRecord],
    changes: Sequence[RuleChange],
    *,
    rules: Collection[str] = (),
    since: datetime | None = None,
) -> tuple[RuleVersionReport, ...]:
    """The route's rule versions, oldest first, each with its checks' summaries.

    `checks` are the route's verdicts in the window; `changes` every rule-change event in the
    store. A version is listed when it has verdicts, or when its rule governs the route (`rules`,
    or a rule with verdicts here, or an event first seen on this route) and its change event falls
    in the window: a new version nothing has been checked on yet is worth seeing too.
    """
    verdicts: dict[_Version, dict[tuple[str, str, str], list[str]]] = defaultdict(
        lambda: defaultdict(list)
    )
    first_verdict: dict[_Version, datetime] = {}
    for record in checks:
        version = (record.rule, record.rule_version)
        verdicts[version][(record.check, record.arm.value, record.target)].append(record.result)
        if version not in first_verdict or record.created_at < first_verdict[version]:
            first_verdict[version] = record.created_at
    governing = set(rules) | {rule for rule, _ in verdicts}
    governing |= {change.rule for change in changes if change.route == route}
    events = {(change.rule, change.version): change for change in changes}
    listed = set(verdicts) | {
        version
        for version, change in events.items()
        if change.rule in governing and (since is None or change.first_seen_at >= since)
    }

    reports = []
    for version in listed:
        change = events.get(version)
        moments = [m for m in (first_verdict.get(version),) if m is not None]
        if change is not None:
            moments.append(change.first_seen_at)
        reports.append(
            RuleVersionReport(
                rule=version[0],
                version=version[1],
                change=change,
                first_seen_at=min(moments, default=None),
                rows=_rows(verdicts.get(version, {})),
            )
        )
    return tuple(
        sorted(
            reports,
            key=lambda r: (r.first_seen_at is None, r.first_seen_at or datetime.min, r.rule),
        )
    )


def _rows(verdicts: dict[tuple[str, str, str], list[str]]) -> tuple[CheckArmReport, ...]:
    """One row per check and arm · target; candidates compared with every primary target's
    verdicts on the same check taken together (more than one when the primary changed)."""
    primary: dict[str, list[str]] = defaultdict(list)
    for (check, arm, _), results in verdicts.items():
        if arm == Arm.PRIMARY.value:
            primary[check].extend(results)
    rows = []
    for check, arm, target in sorted(verdicts, key=lambda k: (k[0], *arm_key(k[1], k[2]))):
        summary = CheckSummary.from_results(verdicts[(check, arm, target)])
        reference = primary.get(check)
        vs_primary = (
            newcombe_difference(summary.pass_rate, CheckSummary.from_results(reference).pass_rate)
            if reference and arm != Arm.PRIMARY.value
            else None
        )
        rows.append(CheckArmReport(check, arm, target, summary, vs_primary))
    return tuple(rows)
