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

from analyzers.verdicts import ArmWindow, Tally
from analyzers.views import Severity, at_or_above
from proxy.core import CUT_SHORT, Arm, ProbeRecord, Status
from proxy.gateway import OVERFLOW_VERSION
from proxy.store import (
    ArmExchange,
    Arms,
    Epoch,
    JudgeWindows,
    ProbeStore,
    ProbeTally,
    ReviewStore,
    experiment_arm_of,
)

from .plan import TrafficProfile

_NOT_ERRORS = (Status.OK.value, Status.CLIENT_DISCONNECTED.value)
_NOT_SERVED = tuple(status.value for status in CUT_SHORT)
"""Exchanges ended by someone else than the arm: the client leaving, the gateway stopping."""


SAMPLES_PER_ARM = 20_000
"""At most this many of each arm's newest exchanges give a look its latency, TTFT and cost
samples (requests and errors are counted over the whole window): what one look holds in memory
stays bounded however long a step is held, and 20,000 samples already measure a quantile ratio
far more finely than any threshold asks."""


def _served(exchanges: Iterable[ArmExchange]) -> dict[Arm, ArmWindow]:
    """Each arm's window of `exchanges` (read once, in one pass, into compact arrays): errors,
    latency, TTFT and cost (client disconnects and shutdown cuts are neither requests nor
    errors: the client chose to leave, the gateway to stop)."""
    counts: dict[Arm, list[int]] = {}
    samples: dict[Arm, tuple[array[float], array[float], array[float]]] = {}
    for e in exchanges:
        if e.status in _NOT_SERVED:
            continue
        if e.arm not in counts:
            counts[e.arm] = [0, 0]
            samples[e.arm] = (array("d"), array("d"), array("d"))
        tally, (latencies, ttfts, costs) = counts[e.arm], samples[e.arm]
        tally[0] += 1
        tally[1] += e.status not in _NOT_ERRORS
        latencies.append(e.duration_s)
        if e.ttft_s is not None:
            ttfts.append(e.ttft_s)
        if e.cost_usd:
            costs.append(e.cost_usd)
    return {
        arm: ArmWindow(
            requests=requests,
            errors=errors,
            latencies_s=tuple(samples[arm][0]),
            ttfts_s=tuple(samples[arm][1]),
            costs_usd=tuple(samples[arm][2]),
        )
        for arm, (requests, errors) in counts.items()
    }


def _sample_since(windows: JudgeWindows, arms: Arms, since: datetime) -> datetime:
    """Where a look's samples start: `since`, or later when an arm has more than
    `SAMPLES_PER_ARM` exchanges since then — the same moment for both arms, so that their
    samples stay concurrent (the busier arm has at most `SAMPLES_PER_ARM`, the other fewer)."""
    starts = [
        windows.nth_newest_start(arms, arm, since, SAMPLES_PER_ARM)
        for arm in (Arm.PRIMARY, Arm.CANARY)
    ]
    return max([since, *(s for s in starts if s is not None)])


def traffic_windows(
    windows: JudgeWindows, arms: Arms, since: datetime, *, corrections_per_caller: int | None = None
) -> tuple[ArmWindow, ArmWindow]:
    """(primary, candidate) windows of errors, latency, TTFT, cost and corrections of the
    exchanges that started since `since` (no rule checks: those are judged per epoch by
    `check_windows`). Requests and errors count every exchange of the window; latency, TTFT and
    cost are sampled from the newest (`SAMPLES_PER_ARM`). Corrections are `(corrected,
    requests)` of the same exchanges, at most `corrections_per_caller` of them from any one
    caller; (0, 0) when neither arm has any (the route gathers no feedback, or none yet)."""
    counts = windows.served_counts(arms, since)
    sample_since = _sample_since(windows, arms, since)
    exchanges = windows.exchanges(arms, sample_since)
    corrected = windows.corrections(arms, since, per_caller=corrections_per_caller)

    sampled = _served(exchanges)

    def window(arm: Arm) -> ArmWindow:
        requests, errors = counts.get(arm, (0, 0))
        served = replace(sampled.get(arm, ArmWindow(0, 0)), requests=requests, errors=errors)
        if not corrected:
            return served
        return replace(
            served, corrections=(min(corrected.get(arm, 0), served.requests), served.requests)
        )

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
