"""When a spent rule-flip probe budget frees again, read from the store (blocking), so that every
replica sees the fleet's spend: each replica's probe results land in the same table.

A rule's probes are capped per target by `probes.max_per_hour` (probes started) and
`probes.max_usd_per_hour`. A `rule_adaptation` verdict that lacks probes because a cap is spent
says until when (`held: probe budget spent until 12:40Z`), in the verdict, `rollout status`, the
console and the log, instead of looking like missing traffic.

The store holds scored probes (`probe_results`): a probe whose call failed is not counted here,
so the moment is when the last hour's *scored* probes fall below a cap — the earliest the budget
can free.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from proxy.config import ProbesSpec
from proxy.store import ProbeStore

HOUR = timedelta(hours=1)


def probe_budget_until(
    probes: ProbeStore, rule: str, spec: ProbesSpec, targets: Sequence[str], now: datetime
) -> datetime | None:
    """The latest moment at which one of `targets`' spent budgets on `rule` frees (a cap reached
    in the last hour), or None when no target's budget is spent."""
    until: datetime | None = None
    for target in targets:
        rows = probes.recent(rule, target=target, since=now - HOUR, limit=spec.max_per_hour)
        frees: datetime | None = None
        if len(rows) >= spec.max_per_hour:
            frees = rows[-1].created_at + HOUR  # the oldest of the last hour's max_per_hour
        if spec.max_usd_per_hour is not None:
            spent = sum(r.cost_usd for r in rows)
            if spent >= spec.max_usd_per_hour:
                # Oldest first, the probes leaving the hour until the spend is below the cap.
                for row in reversed(rows):
                    spent -= row.cost_usd
                    if spent < spec.max_usd_per_hour:
                        moment = row.created_at + HOUR
                        frees = moment if frees is None else max(frees, moment)
                        break
        if frees is not None and frees > now:
            until = frees if until is None else max(until, frees)
    return until


def clock_text(moment: datetime) -> str:
    """`12:40Z` (UTC, to the minute, rounded up: the budget is free by then)."""
    rounded = moment.replace(second=0, microsecond=0)
    if rounded < moment:
        rounded += timedelta(minutes=1)
    return rounded.strftime("%H:%MZ")
