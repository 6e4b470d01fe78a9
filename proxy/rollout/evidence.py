"""What the rollout judge makes of the store's rows: each arm's window of errors, latencies, TTFT,
cost and corrections, its rule check tallies per epoch, its disagreement with the primary, the LLM
judge's score deltas and the share of answers with a severe analyzer finding (blocking; called on
a worker thread by the controller).

The rows come from `proxy.store.JudgeWindows`: the primary arm is the baseline model serving as
`primary`, the candidate arm the canary model serving as `canary`, both of the same route over the
same window — a concurrent baseline, never a comparison with the past. Client disconnects are
neither errors nor latencies (the client chose to leave). Corrections are counted against the
exchanges they are about: an arm's correction rate is its exchanges in the window that some user
corrected (`proxy.core.is_correction`, whenever the feedback arrived) out of its exchanges in the
window. Disagreement reads each pair's verdict under the route's agreement mode, fields and
tolerance (`proxy.core.pair_agreed`), the same verdict the report and
`mirrorgate_agreement_total` count. Rule checks are read per rule epoch: only verdicts on one
version, since that version's first request (or since the rollout started, if later). Rule-flip
probes (`rule_adaptation`) are read per target model from `proxy.store.ProbeStore`, since the
rollout started. Blind reviews (`human_preference`) are read from `proxy.store.ReviewStore`: the
reviews of pairs of the baseline's live answer and the candidate's shadow answer, on the route,
exchanged since the rollout started (whenever they were reviewed).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any

from analyzers.verdicts import ArmWindow, Tally
from analyzers.views import Severity, at_or_above
from proxy.core import CUT_SHORT, Arm, ProbeRecord, Status
from proxy.gateway import OVERFLOW_VERSION
from proxy.store import (
    KEYLESS_PREFIX,
    ArmExchange,
    Arms,
    Epoch,
    JudgeWindows,
    PairUnitCount,
    ProbeStore,
    ProbeTally,
    ReviewStore,
    UnitCount,
    experiment_arm_of,
)

from .plan import TrafficProfile

_NOT_ERRORS = (Status.OK.value, Status.CLIENT_DISCONNECTED.value)
_NOT_SERVED = tuple(status.value for status in CUT_SHORT)
"""Exchanges ended by someone else than the arm: the client leaving, the gateway stopping."""


SAMPLES_PER_ARM = 20_000
"""At most this many of each arm's exchanges give a look its latency, TTFT and cost samples
(requests and errors are counted over the whole window): what one look holds in memory stays
bounded however long a step is held. Each arm is thinned on its own, uniformly over the whole
window (`JudgeWindows.samples`), so both arms' samples cover the same window and an arm with
fewer exchanges than this keeps every one of them (a 10 % canary is never cut to the primary's
newest minutes)."""

MAX_UNIT_GROUPS = 4096
"""At most this many sticky units per breakdown (`ArmWindow.units`, `sample_units`): beyond it,
units are merged into this many groups by the first three hex digits of their keyed hash. A union
of units is still a valid unit (only a little conservative), and 4,096 groups leave a
cluster-robust variance some 4,000 degrees of freedom while a look holds a bounded breakdown.
Exchanges without a unit are independent requests: each is a unit of its own, merged by their
random request id into at most another 4,096 groups in the store's tallies."""


def _breakdown(groups: dict[str, list[int]]) -> tuple[Tally, ...] | None:
    """One tally's `UnitTallies` from its unit groups ((events, total) per `UnitCount.unit`),
    with more than `MAX_UNIT_GROUPS` sticky units merged by hash prefix; None when no group has
    a sticky unit (independent requests: the judge needs no breakdown)."""
    keyed = {u: t for u, t in groups.items() if not u.startswith(KEYLESS_PREFIX)}
    if not keyed:
        return None
    if len(keyed) > MAX_UNIT_GROUPS:
        merged: dict[str, list[int]] = {}
        for unit, (events, total) in keyed.items():
            group = merged.setdefault(unit[:3], [0, 0])
            group[0] += events
            group[1] += total
        keyed = merged
    keyless = (t for u, t in groups.items() if u.startswith(KEYLESS_PREFIX))
    return tuple((e, n) for e, n in (*keyed.values(), *keyless))


def _grouped(counts: Iterable[UnitCount]) -> dict[Arm, dict[str, list[int]]]:
    """Unit counts per arm and group (events, total), summed."""
    grouped: dict[Arm, dict[str, list[int]]] = {}
    for count in counts:
        tally = grouped.setdefault(count.arm, {}).setdefault(count.unit, [0, 0])
        tally[0] += count.events
        tally[1] += count.total
    return grouped


def _totals(groups: dict[str, list[int]]) -> Tally:
    return sum(e for e, _ in groups.values()), sum(n for _, n in groups.values())


class _Indexes:
    """Each sample's unit as an index: one per sticky unit (more than `MAX_UNIT_GROUPS` merged
    by hash prefix), and one of its own for each sample without a unit."""

    def __init__(self) -> None:
        self.of_unit: dict[str, int] = {}
        self.next = 0

    def index(self, unit: str | None) -> int:
        if unit is not None:
            found = self.of_unit.get(unit)
            if found is not None:
                return found
            self.of_unit[unit] = self.next
        self.next += 1
        return self.next - 1

    def bounded(self) -> dict[int, int] | None:
        """Index → merged index when there are more than `MAX_UNIT_GROUPS` units (the merged
        indexes again 0, 1, 2... in order of first appearance), else None."""
        if len(self.of_unit) <= MAX_UNIT_GROUPS:
            return None
        prefix_of = {i: unit[:3] for unit, i in self.of_unit.items()}
        merged: dict[str, int] = {}
        remap: dict[int, int] = {}
        fresh = 0
        for i in range(self.next):
            prefix = prefix_of.get(i)
            if prefix is not None and prefix in merged:
                remap[i] = merged[prefix]
                continue
            remap[i] = fresh
            if prefix is not None:
                merged[prefix] = fresh
            fresh += 1
        return remap


def _served(exchanges: Iterable[ArmExchange]) -> dict[Arm, ArmWindow]:
    """Each arm's window of `exchanges` (read once, in one pass, into compact arrays): errors,
    latency, TTFT and cost, with each sample's unit when some exchange has a sticky unit
    (client disconnects and shutdown cuts are neither requests nor errors: the client chose to
    leave, the gateway to stop)."""
    counts: dict[Arm, list[int]] = {}
    samples: dict[Arm, tuple[array[float], array[float], array[float]]] = {}
    units: dict[Arm, tuple[array[int], array[int], array[int]]] = {}
    indexes: dict[Arm, _Indexes] = {}
    for e in exchanges:
        if e.status in _NOT_SERVED:
            continue
        if e.arm not in counts:
            counts[e.arm] = [0, 0]
            samples[e.arm] = (array("d"), array("d"), array("d"))
            units[e.arm] = (array("q"), array("q"), array("q"))
            indexes[e.arm] = _Indexes()
        tally, (latencies, ttfts, costs) = counts[e.arm], samples[e.arm]
        of = units[e.arm]
        i = indexes[e.arm].index(e.unit)
        tally[0] += 1
        tally[1] += e.status not in _NOT_ERRORS
        latencies.append(e.duration_s)
        of[0].append(i)
        if e.ttft_s is not None:
            ttfts.append(e.ttft_s)
            of[1].append(i)
        if e.cost_usd:
            costs.append(e.cost_usd)
            of[2].append(i)
    windows: dict[Arm, ArmWindow] = {}
    for arm, (requests, errors) in counts.items():
        sample_units: dict[str, tuple[int, ...]] = {}
        if indexes[arm].of_unit:
            remap = indexes[arm].bounded()
            for name, series in zip(
                ("latencies_s", "ttfts_s", "costs_usd"), units[arm], strict=True
            ):
                sample_units[name] = (
                    tuple(series) if remap is None else tuple(remap[i] for i in series)
                )
        windows[arm] = ArmWindow(
            requests=requests,
            errors=errors,
            latencies_s=tuple(samples[arm][0]),
            ttfts_s=tuple(samples[arm][1]),
            costs_usd=tuple(samples[arm][2]),
            sample_units=sample_units,
        )
    return windows


def traffic_windows(
    windows: JudgeWindows, arms: Arms, since: datetime, *, corrections_per_caller: int | None = None
) -> tuple[ArmWindow, ArmWindow]:
    """(primary, candidate) windows of errors, latency, TTFT, cost and corrections of the
    exchanges that started since `since` (no rule checks: those are judged per epoch by
    `epoch_windows`). Requests and errors count every exchange of the window; latency, TTFT and
    cost are at most `SAMPLES_PER_ARM` per arm, thinned uniformly over the window. Corrections
    are `(corrected, requests)` of the same exchanges, at most `corrections_per_caller` of them
    from any one caller; (0, 0) when neither arm has any (the route gathers no feedback, or none
    yet). When some exchange of an arm has a sticky unit, its window carries the breakdowns by
    unit (`units["errors"]`, `units["corrections"]`, `sample_units` of its series)."""
    if windows.has_units(arms, since):
        served = _grouped(windows.served_units(arms, since))
        corrected = _grouped(
            windows.correction_units(arms, since, per_caller=corrections_per_caller)
        )
    else:  # no sticky key: the plain counts, as one group of independent requests
        served = {
            arm: {KEYLESS_PREFIX: [errors, requests]}
            for arm, (requests, errors) in windows.served_counts(arms, since).items()
        }
        corrected = {
            arm: {KEYLESS_PREFIX: [n, 0]}
            for arm, n in windows.corrections(
                arms, since, per_caller=corrections_per_caller
            ).items()
        }

    def window(arm: Arm) -> ArmWindow:
        groups = served.get(arm, {})
        errors, requests = _totals(groups)
        rows = windows.samples(arms, arm, since, served=requests, cap=SAMPLES_PER_ARM)
        sampled = _served(rows).get(arm, ArmWindow(0, 0))
        units: dict[str, tuple[Tally, ...]] = {}
        if (errors_by_unit := _breakdown(groups)) is not None:
            units["errors"] = errors_by_unit
        window = replace(sampled, requests=requests, errors=errors)
        if corrected:
            fixed = corrected.get(arm, {})
            by_unit = {u: [min(fixed.get(u, [0])[0], n), n] for u, (_, n) in groups.items()}
            window = replace(window, corrections=(sum(c for c, _ in by_unit.values()), requests))
            if (corrections_by_unit := _breakdown(by_unit)) is not None:
                units["corrections"] = corrections_by_unit
        return replace(window, units=units) if units else window

    return window(Arm.PRIMARY), window(Arm.CANARY)


def current_epoch(windows: JudgeWindows, rule: str) -> Epoch | None:
    """The newest version of `rule` seen by any replica, and when it was first seen."""
    return windows.newest_version(rule)


def active_epochs(windows: JudgeWindows, arms: Arms, rule: str, since: datetime) -> list[Epoch]:
    """Every opened version of `rule` whose checks ran on either arm since `since` — each is an
    epoch judged on its own (clients may move between versions, and back) — or, when no check
    ran, the newest version seen. Each epoch starts at its version's first request.

    Versions that have not opened (seen fewer than `version_min_requests` times: no rule-change
    event yet) and the `overflow` version of a rule past its cap are not epochs: too few of the
    one to judge, a mixture of many in the other."""
    active = windows.checked_versions(arms, rule, since)
    firsts = windows.first_seen(rule)
    opened = {v: e for v, e in active.items() if v in firsts and v != OVERFLOW_VERSION}
    if not opened:
        newest = windows.newest_version(rule)
        return [newest] if newest is not None and newest.version != OVERFLOW_VERSION else []
    return [Epoch(rule, version, firsts[version]) for version in sorted(opened)]


def check_windows(
    windows: JudgeWindows, arms: Arms, epoch: Epoch, since: datetime
) -> tuple[dict[str, Tally], dict[str, Tally]]:
    """Per check: (passed, total) for the primary and the candidate, on `epoch`'s version since
    `since`. A check that errored (could not judge the answer) counts as not passed."""
    tallies: dict[Arm, dict[str, list[int]]] = {Arm.PRIMARY: {}, Arm.CANARY: {}}
    for row in windows.check_counts(arms, epoch, since):
        tally = tallies[row.arm].setdefault(row.check, [0, 0])
        tally[1] += row.count
        if row.result == "pass":
            tally[0] += row.count
    names = tallies[Arm.PRIMARY].keys() | tallies[Arm.CANARY].keys()

    def side(arm: Arm) -> dict[str, Tally]:
        return {n: (tallies[arm].get(n, [0, 0])[0], tallies[arm].get(n, [0, 0])[1]) for n in names}

    return side(Arm.PRIMARY), side(Arm.CANARY)


def epoch_windows(
    windows: JudgeWindows, arms: Arms, epoch: Epoch, since: datetime
) -> tuple[ArmWindow, ArmWindow]:
    """(primary, candidate) windows of `epoch`'s rule checks since `since` (`checks`, as
    `check_windows` tallies them), each check broken down by the sticky unit of the request its
    verdicts are about (`units["checks:<name>"]`) when some request of the arm had one."""
    tallies: dict[Arm, dict[str, dict[str, list[int]]]] = {Arm.PRIMARY: {}, Arm.CANARY: {}}
    if windows.has_units(arms, since):
        for row in windows.check_units(arms, epoch, since):
            by_unit = tallies[row.arm].setdefault(row.check, {})
            tally = by_unit.setdefault(row.count.unit, [0, 0])
            tally[0] += row.count.events
            tally[1] += row.count.total
    else:  # no sticky key: the plain counts, as one group of independent requests
        for plain in windows.check_counts(arms, epoch, since):
            tally = (
                tallies[plain.arm].setdefault(plain.check, {}).setdefault(KEYLESS_PREFIX, [0, 0])
            )
            tally[0] += plain.count if plain.result == "pass" else 0
            tally[1] += plain.count
    names = tallies[Arm.PRIMARY].keys() | tallies[Arm.CANARY].keys()

    def side(arm: Arm) -> ArmWindow:
        checks = {n: _totals(tallies[arm].get(n, {})) for n in names}
        units = {
            f"checks:{n}": b
            for n in names
            if (b := _breakdown(tallies[arm].get(n, {}))) is not None
        }
        return ArmWindow(0, 0, checks=checks, units=units)

    return side(Arm.PRIMARY), side(Arm.CANARY)


def failing_examples(
    windows: JudgeWindows, arms: Arms, epoch: Epoch, check: str, since: datetime, limit: int = 5
) -> list[str]:
    """Request ids of candidate answers that failed `check` in the epoch (for the alert)."""
    return windows.failed_requests(arms, epoch, check, since, limit)


def agreement_tallies(
    windows: JudgeWindows, arms: Arms, mode: str, since: datetime
) -> tuple[Tally, Tally]:
    """(disagree, pairs) of the candidate's shadow pairs with the primary, and of the route's
    noise pairs (the primary asked twice), since `since`; only pairs where both answered well.

    The candidate is judged on its shadow pairs: a canary's own answers have no primary answer to
    the same request. A pair counts when the route's comparison applies to it; `mode` is the
    route's agreement mode, read only for pairs stored without a verdict
    (`JudgeWindows.pair_counts`).
    """
    shadow, noise = [0, 0], [0, 0]
    for row in windows.pair_counts(arms, mode, since):
        if row.kind == "noise":
            tally = noise
        elif row.kind == "shadow" and row.candidate_target == arms.candidate:
            tally = shadow
        else:
            continue
        tally[1] += row.count
        if not row.agreed:
            tally[0] += row.count
    return (shadow[0], shadow[1]), (noise[0], noise[1])


def with_agreement(
    windows: JudgeWindows,
    arms: Arms,
    mode: str,
    since: datetime,
    primary: ArmWindow,
    candidate: ArmWindow,
) -> tuple[ArmWindow, ArmWindow]:
    """`primary` with its `noise` and `candidate` with its `agreement` (`agreement_tallies`), each
    broken down by the sticky unit of the pairs' client requests (`units["noise"]`,
    `units["agreement"]`) when some request had one."""
    shadow: dict[str, list[int]] = {}
    noise: dict[str, list[int]] = {}
    rows = (
        windows.pair_units(arms, mode, since)
        if windows.has_units(arms, since)
        else [
            PairUnitCount(
                c.kind, c.candidate_target, KEYLESS_PREFIX, 0 if c.agreed else c.count, c.count
            )
            for c in windows.pair_counts(arms, mode, since)
        ]
    )
    for row in rows:
        if row.kind == "noise":
            groups = noise
        elif row.kind == "shadow" and row.candidate_target == arms.candidate:
            groups = shadow
        else:
            continue
        tally = groups.setdefault(row.unit, [0, 0])
        tally[0] += row.disagree
        tally[1] += row.pairs
    return (
        _with_tally(primary, "noise", noise),
        _with_tally(candidate, "agreement", shadow),
    )


def with_findings(
    windows: JudgeWindows,
    arms: Arms,
    severity: Severity,
    since: datetime,
    primary: ArmWindow,
    candidate: ArmWindow,
) -> tuple[ArmWindow, ArmWindow]:
    """The windows with their `findings` (`finding_tallies`), broken down by sticky unit
    (`units["findings"]`) when some exchange had one."""
    severities = at_or_above(severity)
    grouped = (
        _grouped(windows.finding_units(arms, severities, since))
        if windows.has_units(arms, since)
        else {
            c.arm: {KEYLESS_PREFIX: [c.flagged, c.answers]}
            for c in windows.finding_counts(arms, severities, since)
        }
    )
    return (
        _with_tally(primary, "findings", grouped.get(Arm.PRIMARY, {})),
        _with_tally(candidate, "findings", grouped.get(Arm.CANARY, {})),
    )


def with_judge_deltas(
    windows: JudgeWindows, arms: Arms, since: datetime, candidate: ArmWindow
) -> ArmWindow:
    """`candidate` with its `judge_deltas` (as `judge_deltas` reads them), each with the index of
    its pair's sticky unit (`sample_units["judge_deltas"]`) when some pair's request had one."""
    rows = (
        windows.judge_delta_units(arms, since)
        if windows.has_units(arms, since)
        else [(delta, None) for delta in windows.judge_deltas(arms, since)]
    )
    deltas = tuple(value for value, _ in rows)
    return _with_series(candidate, "judge_deltas", deltas, [unit for _, unit in rows])


def _with_tally(window: ArmWindow, name: str, groups: dict[str, list[int]]) -> ArmWindow:
    """`window` with tally `name` summed from `groups`, and its breakdown when it has one."""
    tally: dict[str, Any] = {name: _totals(groups)}  # a field of ArmWindow's, named
    window = replace(window, **tally)
    breakdown = _breakdown(groups)
    if breakdown is None:
        return window
    return replace(window, units={**window.units, name: breakdown})


def _with_series(
    window: ArmWindow, name: str, series: tuple[float, ...], units: list[str | None]
) -> ArmWindow:
    """`window` with sample series `name`, and each sample's unit index when some has a unit."""
    samples: dict[str, Any] = {name: series}  # a field of ArmWindow's, named
    window = replace(window, **samples)
    indexes = _Indexes()
    of = [indexes.index(u) for u in units]
    if not indexes.of_unit:
        return window
    remap = indexes.bounded()
    if remap is not None:
        of = [remap[i] for i in of]
    return replace(window, sample_units={**window.sample_units, name: tuple(of)})


PROFILE_SAMPLES = 20_000
"""At most this many of the latest exchanges make a traffic profile's distributions (the rate
counts them all): `--since 7d` on a busy route must not read millions of rows."""


def traffic_profile(
    windows: JudgeWindows,
    route: str,
    primary: str,
    rule: str | None,
    since: datetime,
    now: datetime,
) -> TrafficProfile:
    """What `primary` served on `route` since `since` (and its checks on the newest version of
    `rule`), for sizing a rollout (`proxy.rollout.plan`): the rate of all of it, the error rate
    and the distributions of the latest `PROFILE_SAMPLES` answers."""
    arms = Arms(route, primary, "")  # no candidate: only the baseline's own exchanges
    total = windows.count_exchanges(arms, since)
    served = _served(windows.exchanges(arms, since, newest=PROFILE_SAMPLES)).get(
        Arm.PRIMARY, ArmWindow(0, 0)
    )
    checks: dict[str, Tally] = {}
    if rule is not None:
        newest = windows.newest_version(rule)
        if newest is not None:
            checks = check_windows(windows, arms, newest, max(since, newest.started_at))[0]
    span = max((now - since).total_seconds(), 1.0)
    return TrafficProfile(
        rate_per_s=total / span,
        requests=served.requests,
        errors=served.errors,
        latencies_s=served.latencies_s,
        ttfts_s=served.ttfts_s,
        costs_usd=served.costs_usd,
        checks=checks,
    )


def judge_deltas(windows: JudgeWindows, arms: Arms, since: datetime) -> tuple[float, ...]:
    """`ArmWindow.judge_deltas` of the candidate: per LLM-judged shadow pair of the candidate
    against the route's baseline since `since`, candidate score minus primary score (each
    averaged over both answer orders, 1-10 scale), oldest pair first; () when none was judged."""
    return tuple(windows.judge_deltas(arms, since))


def finding_tallies(
    windows: JudgeWindows, arms: Arms, severity: Severity, since: datetime
) -> tuple[Tally, Tally]:
    """`ArmWindow.findings` of the (primary, candidate): (answers with a finding at or above
    `severity`, answers analysed) over each arm's `ok` answers since `since`."""
    counts = {row.arm: (row.flagged, row.answers) for row in windows.finding_counts(
        arms, at_or_above(severity), since
    )}  # fmt: skip
    return counts.get(Arm.PRIMARY, (0, 0)), counts.get(Arm.CANARY, (0, 0))


def probe_tallies(
    probes: ProbeStore, rule: str, arms: Arms, since: datetime
) -> tuple[ProbeTally, ProbeTally]:
    """The baseline's and the candidate's scored rule-flip probes of `rule` since `since` (of
    every route the rule covers: a probe measures the model on the rule, whichever route's
    request it flipped)."""
    by_target = probes.tallies(rule, since=since, targets=[arms.baseline, arms.candidate])
    return by_target.get(arms.baseline, ProbeTally()), by_target.get(arms.candidate, ProbeTally())


def not_followed(tally: ProbeTally) -> Tally:
    """(probes not followed, probes): the judge's bad events of `rule_adaptation`."""
    return tally.stuck + tally.other, tally.probes


def adaptation_windows(
    windows: JudgeWindows,
    rule: str,
    arms: Arms,
    since: datetime,
    tallies: tuple[ProbeTally, ProbeTally],
) -> tuple[ArmWindow, ArmWindow]:
    """The baseline's and the candidate's `adaptation` windows (`not_followed` of `tallies`,
    from `probe_tallies`), each broken down by the sticky unit of the live requests its probes
    re-sent (`units["adaptation"]`) when some had one and the breakdown adds up to the tally
    (probes scored between the two reads are left to the next look)."""
    by_target = (
        windows.adaptation_units(rule, since, [arms.baseline, arms.candidate])
        if windows.has_units(arms, since)
        else {}
    )

    def side(target: str, tally: ProbeTally) -> ArmWindow:
        whole = not_followed(tally)
        groups: dict[str, list[int]] = {}
        for count in by_target.get(target, []):
            group = groups.setdefault(count.unit, [0, 0])
            group[0] += count.events
            group[1] += count.total
        breakdown = _breakdown(groups)
        if breakdown is None or _totals(groups) != whole:
            return ArmWindow(0, 0, adaptation=whole)
        return ArmWindow(0, 0, adaptation=whole, units={"adaptation": breakdown})

    return side(arms.baseline, tallies[0]), side(arms.candidate, tallies[1])


def stuck_examples(
    probes: ProbeStore, rule: str, candidate: str, since: datetime, limit: int = 5
) -> list[ProbeRecord]:
    """The candidate's newest probes that kept the old value (or, if none did, that did not
    follow the flipped one), newest first: the evidence an alert shows."""
    stuck = probes.recent(rule, target=candidate, result="stuck", since=since, limit=limit)
    if stuck:
        return stuck
    return probes.recent(rule, target=candidate, result="other", since=since, limit=limit)


def human_preferences(reviews: ReviewStore, arms: Arms, since: datetime) -> tuple[float, ...]:
    """`ArmWindow.preferences` of the candidate: per blind review of a pair of the baseline's
    answer and the candidate's answer to the same request on `arms.route`, exchanged since
    `since`, 1 when the reviewer preferred the candidate's, 0 the baseline's, 0.5 a tie, oldest
    review first; () when none. (Experiments read their arms' reviews by arm instead:
    `experiment_preferences`.)"""
    reviewed = reviews.reviewed(
        route=arms.route, since=since, targets=(arms.baseline, arms.candidate)
    )
    return tuple(p for r in reviewed if (p := r.candidate_preference) is not None)


def preference_window(
    reviews: ReviewStore, windows: JudgeWindows, arms: Arms, since: datetime
) -> ArmWindow:
    """The candidate's window of `preferences` (as `human_preferences` reads them), each with
    the index of its pair's sticky unit (`sample_units["preferences"]`) when some reviewed
    request had one."""
    reviewed = reviews.reviewed(
        route=arms.route, since=since, targets=(arms.baseline, arms.candidate)
    )
    kept = [
        (p, r.item.candidate.request_id)
        for r in reviewed
        if (p := r.candidate_preference) is not None
    ]
    units = windows.units_of([r for _, r in kept]) if windows.has_units(arms, since) else {}
    window = ArmWindow(0, 0, preferences=())
    return _with_series(
        window, "preferences", tuple(p for p, _ in kept), [units.get(r) for _, r in kept]
    )


def experiment_preferences(
    reviews: ReviewStore, route: str, control: str, since: datetime
) -> dict[str, tuple[float, ...]]:
    """`analyzers.experiments.decide`'s `preferences`: per experiment arm of `route`, its blind
    reviews against `control` (items of source `experiment`, exchanged since `since`), 1 when
    the reviewer preferred the arm's answer, 0 control's, 0.5 a tie, oldest review first; an
    arm is its item side's recorded arm, whichever side the live answer was."""
    found: dict[str, list[float]] = {}
    for r in reviews.reviewed(route=route, since=since):
        item = r.item.candidate
        if item.source != "experiment":
            continue
        preference = r.candidate_preference
        served, other = experiment_arm_of(item.primary_arm), experiment_arm_of(item.candidate_arm)
        if preference is None or served is None or other is None:
            continue
        if served == control and other != control:
            found.setdefault(other, []).append(preference)
        elif other == control and served != control:
            found.setdefault(served, []).append(1.0 - preference)
    return {arm: tuple(scores) for arm, scores in found.items()}
