"""What the rollout judge reads from the store, on SQLite and PostgreSQL."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from proxy.core.records import (
    Arm,
    CheckRecord,
    ExchangeRecord,
    FeedbackRecord,
    FindingRecord,
    PairRecord,
    ProbeRecord,
    Status,
)
from proxy.rollout.evidence import (
    SAMPLES_PER_ARM,
    Arms,
    Epoch,
    active_epochs,
    adaptation_windows,
    agreement_tallies,
    check_windows,
    current_epoch,
    epoch_windows,
    experiment_preferences,
    failing_examples,
    finding_tallies,
    judge_deltas,
    preference_window,
    probe_tallies,
    traffic_windows,
    with_agreement,
    with_findings,
    with_judge_deltas,
)
from proxy.store import ANY_VERSION, ProbeStore, ReviewStore, experiment_side
from proxy.store.exchanges import Store
from proxy.store.feedback import FeedbackStore
from proxy.store.judge_windows import JudgeWindows, PairCount
from tests.conftest import seed_sqlite
from tests.proxy.store.test_exchanges import T0, make_record
from tests.proxy.store.test_reviews import experiment_pair, queued, review, shadow_pair

ARMS = Arms("support-bot", "prod", "cand")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path, migrated_sqlite: Path) -> Any:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'w.db'}"
        seed_sqlite(url, migrated_sqlite)
    else:
        url = str(request.getfixturevalue("pg_migrated_schema")[0])
    with Store(url) as opened:
        opened.migrate()
        yield opened


def test_traffic_windows_compare_the_baseline_and_the_canary_in_the_same_window(
    store: Store,
) -> None:
    at = T0 + timedelta(seconds=30)
    store.write_batch(
        [
            make_record(target="prod", arm=Arm.PRIMARY, started_at=at, duration_s=0.2),
            make_record(target="prod", arm=Arm.PRIMARY, started_at=at, status=Status.TIMEOUT),
            make_record(target="prod", arm=Arm.PRIMARY, started_at=at, ttft_s=0.05, streamed=True),
            make_record(
                target="cand", arm=Arm.CANARY, started_at=at, duration_s=0.4, cost_usd=0.01
            ),
            make_record(
                target="cand", arm=Arm.CANARY, started_at=at, status=Status.CLIENT_DISCONNECTED
            ),
            # Not in the comparison: too old, another arm or target, another route.
            make_record(target="cand", arm=Arm.CANARY, started_at=T0 - timedelta(seconds=1)),
            make_record(target="cand", arm=Arm.SHADOW, started_at=at),
            make_record(target="safe", arm=Arm.FALLBACK, started_at=at),
            make_record(target="cand", arm=Arm.PRIMARY, started_at=at),
            make_record(route="other", target="cand", arm=Arm.CANARY, started_at=at),
        ]
    )
    primary, candidate = traffic_windows(JudgeWindows(store), ARMS, T0)
    assert (primary.requests, primary.errors) == (3, 1)
    assert sorted(primary.latencies_s) == [0.2, 0.25, 0.25]
    assert primary.ttfts_s == (0.05,)
    # A client that left is neither an error nor a latency of the candidate.
    assert (candidate.requests, candidate.errors, candidate.latencies_s) == (1, 0, (0.4,))
    assert candidate.costs_usd == (0.01,)


def test_a_long_step_counts_every_exchange_and_thins_each_arm_over_the_whole_step(
    store: Store,
) -> None:
    # A 10 % step: 60,000 primary and 6,000 canary answers over 60 minutes (each answer's
    # duration says its minute). The canary keeps every sample; the primary at most the cap,
    # spread over the whole step, both ends included; requests and errors count every answer.
    ids = random.Random(34)
    records = [
        make_record(
            request_id=f"{ids.getrandbits(128):032x}",
            target=target,
            arm=arm,
            started_at=T0 + timedelta(seconds=3600 * i / n),
            duration_s=float(int(60 * i / n)),
            status=Status.UPSTREAM_ERROR if i % 100 == 0 else Status.OK,
        )
        for target, arm, n in (("prod", Arm.PRIMARY, 60_000), ("cand", Arm.CANARY, 6_000))
        for i in range(n)
    ]
    records.append(make_record(target="cand", arm=Arm.CANARY, status=Status.SHUTDOWN))
    store.write_batch(records)
    primary, candidate = traffic_windows(JudgeWindows(store), ARMS, T0)
    assert (primary.requests, primary.errors) == (60_000, 600)
    assert (candidate.requests, candidate.errors) == (6_000, 60)  # the shutdown cut left out
    assert len(candidate.latencies_s) == 6_000
    kept = len(primary.latencies_s)
    assert 0.9 * SAMPLES_PER_ARM < kept <= SAMPLES_PER_ARM
    per_minute = Counter(primary.latencies_s)
    assert set(per_minute) == {float(m) for m in range(60)}  # the first and last minutes too
    # Uniform: each minute holds its 1/60 of the samples (~317), within 6 standard deviations.
    assert all(abs(k - kept / 60) < 6 * 18 for k in per_minute.values())


def test_the_correction_rate_is_of_the_windows_answers_whenever_the_feedback_came(
    store: Store,
) -> None:
    at, late = T0 + timedelta(seconds=30), T0 + timedelta(hours=1)
    before = make_record(target="prod", arm=Arm.PRIMARY, started_at=T0 - timedelta(minutes=5))
    primary = [make_record(target="prod", arm=Arm.PRIMARY, started_at=at) for _ in range(4)]
    canary = [make_record(target="cand", arm=Arm.CANARY, started_at=at) for _ in range(2)]
    store.write_batch([before, *primary, *canary])
    feedback = FeedbackStore(store)
    said = [
        # A primary answer of before the rollout, corrected during it: not the window's.
        (before, {"corrected": True}),
        # The user said the answer was right: no correction.
        (primary[0], {"corrected": False}),
        (primary[1], {"corrected": True}),
        (canary[0], {"correction": "150 kg"}),
    ]
    for record, fields in said:
        assert feedback.add(
            FeedbackRecord(
                request_id=record.request_id, kind="correction", route=record.route,
                target=record.target, arm=record.arm, created_at=late, **fields,
            )
        )  # fmt: skip
    primary_window, candidate_window = traffic_windows(JudgeWindows(store), ARMS, T0)
    assert primary_window.corrections == (1, 4)
    assert candidate_window.corrections == (1, 2)


def _check(arm: Arm, target: str, version: str, result: str, n: int, **kw: Any) -> list[Any]:
    return [
        CheckRecord(
            request_id=f"{arm.value}-{version}-{result}-{i}", route="support-bot", target=target,
            arm=arm, rule="shipping", rule_version=version, check="max-weight", result=result,
            reason="", created_at=kw.get("at", T0 + timedelta(seconds=10)),
        )
        for i in range(n)
    ]  # fmt: skip


def test_checks_are_read_per_rule_epoch_and_errors_count_as_not_passed(store: Store) -> None:
    store.write_batch(
        _check(Arm.PRIMARY, "prod", "v1", "pass", 5)
        + _check(Arm.PRIMARY, "prod", "v2", "pass", 4)
        + _check(Arm.PRIMARY, "prod", "v2", "error", 1)
        + _check(Arm.CANARY, "cand", "v2", "fail", 3)
        + _check(Arm.CANARY, "cand", "v2", "pass", 1)
        + _check(Arm.CANARY, "cand", "v2", "fail", 2, at=T0 - timedelta(seconds=5))
        + _check(Arm.SHADOW, "cand", "v2", "fail", 7)
    )
    epoch = Epoch("shipping", "v2", T0)
    primary, candidate = check_windows(JudgeWindows(store), ARMS, epoch, T0)
    assert primary == {"max-weight": (4, 5)}
    assert candidate == {"max-weight": (1, 4)}
    examples = failing_examples(JudgeWindows(store), ARMS, epoch, "max-weight", T0)
    assert sorted(examples) == [f"canary-v2-fail-{i}" for i in range(3)]


def test_the_current_epoch_is_the_newest_version_first_seen(store: Store) -> None:
    events = sa.table(
        "rule_events", sa.column("rule"), sa.column("version"), sa.column("previous_version"),
        sa.column("first_seen_at"), sa.column("request_id"), sa.column("route"),
    )  # fmt: skip
    assert current_epoch(JudgeWindows(store), "shipping") is None
    with store.engine.begin() as conn:
        for version, seconds in (("v1", 0), ("v2", 60), ("v0", -60)):
            conn.execute(
                sa.insert(events).values(
                    rule="shipping",
                    version=version,
                    previous_version=None,
                    first_seen_at=T0 + timedelta(seconds=seconds),
                    request_id="r",
                    route="r",
                )
            )
    epoch = current_epoch(JudgeWindows(store), "shipping")
    assert epoch == Epoch("shipping", "v2", T0 + timedelta(seconds=60))


class Rows:
    """Judge rows without a database: the assembly below is pure."""

    def __init__(self, **rows: Any) -> None:
        self.rows = rows

    def checked_versions(self, arms: Arms, rule: str, since: Any) -> dict[str, Any]:
        return dict(self.rows.get("checked", {}))

    def first_seen(self, rule: str) -> dict[str, Any]:
        return dict(self.rows.get("first_seen", {}))

    def newest_version(self, rule: str) -> Epoch | None:
        newest: Epoch | None = self.rows.get("newest")
        return newest

    def pair_counts(self, arms: Arms, mode: str, since: Any) -> list[PairCount]:
        return list(self.rows.get("pairs", []))


def test_each_checked_opened_version_is_an_epoch_from_its_first_request() -> None:
    later = T0 + timedelta(minutes=10)
    rows = Rows(
        checked={"v2": later, "v1": later, "v3": later, "overflow": later},
        # v3 has not opened yet (no event: seen fewer than version_min_requests times); overflow
        # mixes every version past the cap. Neither is an epoch: either would only hold.
        first_seen={"v1": T0, "v2": T0 + timedelta(minutes=5), "overflow": T0},
    )
    assert active_epochs(rows, ARMS, "shipping", T0) == [
        Epoch("shipping", "v1", T0),
        Epoch("shipping", "v2", T0 + timedelta(minutes=5)),
    ]
    newest = Epoch("shipping", "v9", T0)
    assert active_epochs(Rows(newest=newest), ARMS, "shipping", T0) == [newest]
    overflowing = Epoch("shipping", "overflow", T0)
    assert active_epochs(Rows(newest=overflowing), ARMS, "shipping", T0) == []
    assert active_epochs(Rows(), ARMS, "shipping", T0) == []


def test_disagreement_is_the_candidates_shadow_pairs_and_the_noise_floor() -> None:
    rows = Rows(
        pairs=[
            PairCount("shadow", "cand", True, 6),
            PairCount("shadow", "cand", False, 2),
            PairCount("shadow", "other-candidate", False, 9),
            PairCount("noise", "prod", False, 1),
            PairCount("noise", "prod", True, 3),
            PairCount("replay", "cand", False, 4),
        ]
    )
    assert agreement_tallies(rows, ARMS, "json", T0) == ((2, 8), (1, 4))


def _judged_pair(delta: float, **fields: Any) -> list[PairRecord | FindingRecord]:
    """A shadow pair of the candidate and the LLM judge's score delta on it."""
    at = T0 + timedelta(seconds=30)
    values: dict[str, Any] = {
        "pair_id": f"p-{delta}-{len(fields)}", "kind": "shadow", "request_id": f"r-{delta}",
        "route": "support-bot", "primary_target": "prod", "candidate_target": "cand",
        "created_at": at, "primary_status": "ok", "candidate_status": "ok",
        "exact_equal": False, "normalized_equal": False, "json_equal": None,
    }  # fmt: skip
    values.update(fields)
    pair = PairRecord(**values)
    score = FindingRecord(
        request_id=pair.request_id, route=pair.route, target=pair.candidate_target,
        arm=Arm.SHADOW, analyzer="judge", name="score_delta", created_at=at, value=delta,
        pair_id=pair.pair_id,
    )  # fmt: skip
    return [pair, score]


def test_judge_deltas_fill_the_candidates_window_from_the_store(store: Store) -> None:
    store.write_batch(_judged_pair(-1.5))
    store.write_batch(_judged_pair(0.5, created_at=T0 + timedelta(seconds=40)))
    store.write_batch(_judged_pair(3.0, candidate_target="other", pair_id="p-other"))
    deltas = judge_deltas(JudgeWindows(store), ARMS, T0)
    assert deltas == (-1.5, 0.5)
    assert judge_deltas(JudgeWindows(store), ARMS, T0 + timedelta(minutes=5)) == ()


def test_finding_tallies_count_answers_at_or_above_the_severity(store: Store) -> None:
    at = T0 + timedelta(seconds=30)
    canary = [make_record(target="cand", arm=Arm.CANARY, started_at=at) for _ in range(4)]
    primary = [make_record(target="prod", arm=Arm.PRIMARY, started_at=at) for _ in range(5)]
    store.write_batch([*canary, *primary])

    def found(record: Any, severity: str | None) -> FindingRecord:
        return FindingRecord(
            request_id=record.request_id, route=record.route, target=record.target,
            arm=record.arm, analyzer="tone", name="rude", created_at=at, severity=severity,
        )  # fmt: skip

    store.write_batch(
        [
            found(canary[0], "critical"),
            found(canary[1], "warning"),
            found(canary[2], "info"),
            found(canary[3], None),
            found(primary[0], "warning"),
        ]
    )
    windows = JudgeWindows(store)
    assert finding_tallies(windows, ARMS, "warning", T0) == ((1, 5), (2, 4))
    assert finding_tallies(windows, ARMS, "critical", T0) == ((0, 5), (1, 4))
    assert finding_tallies(windows, ARMS, "info", T0) == ((1, 5), (3, 4))
    # No answers in the window: nothing counted, on either arm.
    assert finding_tallies(windows, ARMS, "warning", T0 + timedelta(minutes=5)) == ((0, 0), (0, 0))


def test_a_traffic_profile_counts_all_of_the_period_and_samples_the_latest(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from proxy.rollout import evidence  # the module, to lower its sample bound

    monkeypatch.setattr(evidence, "PROFILE_SAMPLES", 10)
    records = [
        make_record(
            route="support-bot",
            target="prod",
            started_at=T0 + timedelta(seconds=i),
            duration_s=1.0 + i,
            status=Status.UPSTREAM_ERROR if i == 29 else Status.OK,
        )
        for i in range(30)
    ]
    records.append(make_record(route="support-bot", target="cand", arm=Arm.CANARY, started_at=T0))
    store.write_batch(records)
    profile = evidence.traffic_profile(
        JudgeWindows(store), "support-bot", "prod", None, T0, T0 + timedelta(seconds=60)
    )
    assert profile.rate_per_s == pytest.approx(30 / 60)  # all 30 of the primary, no canary
    assert profile.requests == 10 and profile.errors == 1  # the latest 10: 20..29
    assert sorted(profile.latencies_s) == [21.0 + i for i in range(10)]


def test_experiment_preferences_are_each_arms_reviews_against_control(store: Store) -> None:
    reviews = ReviewStore(store)
    records: list[Any] = []
    for n in range(4):
        records += experiment_pair(n, "control" if n < 3 else "b")
    store.write_batch(records)
    found = reviews.experiment_candidates("support-bot", ANY_VERSION, since=T0)
    by_pair = {c.pair_id: c for c in found}

    def reviewed(pair: str, other: str, preference: str, shown_as: str = "A") -> None:
        c = replace(by_pair[pair], candidate_arm=experiment_side(other))
        item = queued(c, shown_as=shown_as)
        assert reviews.enqueue([item]) == 1
        assert reviews.add(review(item, "reviewer-1", preference=preference))

    reviewed("pair-0", "b", "A")  # b's answer shown as A, preferred: 1
    reviewed("pair-1", "b", "tie")  # 0.5
    reviewed("pair-2", "c", "A", shown_as="B")  # control's answer (A) preferred: c gets 0
    reviewed("pair-3", "control", "A")  # b live, control's shadow preferred: b gets 0
    assert experiment_preferences(reviews, "support-bot", "control", T0) == {
        "b": (1.0, 0.5, 0.0),
        "c": (0.0,),
    }
    assert experiment_preferences(reviews, "support-bot", "control", T0 + timedelta(hours=1)) == {}
    assert experiment_preferences(reviews, "other-route", "control", T0) == {}


def _user(n: int) -> str:
    return f"{n:024x}"  # a sticky unit as the gateway records it: 24 hex digits


def test_every_breakdown_groups_by_the_requests_sticky_unit_and_adds_up(store: Store) -> None:
    at = T0 + timedelta(seconds=30)
    # Primary: user 1 sends 3 requests (1 fails), user 2 sends 2, and 2 requests carry no key.
    # Canary: user 3 sends 4 requests (2 fail, one with no TTFT).
    primary = [
        make_record(target="prod", arm=Arm.PRIMARY, started_at=at, sticky_unit=u, status=s,
                    ttft_s=0.1, duration_s=d)
        for u, s, d in [(_user(1), Status.TIMEOUT, 1.0), (_user(1), Status.OK, 1.1),
                        (_user(1), Status.OK, 1.2), (_user(2), Status.OK, 2.0),
                        (_user(2), Status.OK, 2.1), (None, Status.OK, 3.0), (None, Status.OK, 3.1)]
    ]  # fmt: skip
    canary = [
        make_record(target="cand", arm=Arm.CANARY, started_at=at, sticky_unit=_user(3),
                    status=Status.UPSTREAM_ERROR if i < 2 else Status.OK,
                    ttft_s=None if i == 0 else 0.2, cost_usd=0.01)
        for i in range(4)
    ]  # fmt: skip
    store.write_batch([*primary, *canary])
    feedback = FeedbackStore(store)
    for record in (primary[1], primary[2], canary[3]):
        feedback.add(
            FeedbackRecord(
                request_id=record.request_id, kind="correction", route=record.route,
                target=record.target, arm=record.arm, created_at=at, corrected=True,
            )
        )  # fmt: skip
    windows = JudgeWindows(store)
    p, c = traffic_windows(windows, ARMS, T0)
    # The windows validate on construction that every breakdown adds up to its tally.
    assert (p.requests, p.errors, c.requests, c.errors) == (7, 1, 4, 2)
    assert sorted(p.units["errors"]) == [(0, 1), (0, 1), (0, 2), (1, 3)]
    assert c.units["errors"] == ((2, 4),)
    assert sorted(p.units["corrections"]) == [(0, 1), (0, 1), (0, 2), (2, 3)]
    assert c.corrections == (1, 4) and c.units["corrections"] == ((1, 4),)
    # Samples: the same index for one user's samples, an index of its own for a keyless one.
    by_unit: dict[int, list[float]] = {}
    for latency, unit in zip(p.latencies_s, p.sample_units["latencies_s"], strict=True):
        by_unit.setdefault(unit, []).append(latency)
    assert sorted(sorted(v) for v in by_unit.values()) == [
        [1.0, 1.1, 1.2],
        [2.0, 2.1],
        [3.0],
        [3.1],
    ]
    assert len(set(c.sample_units["latencies_s"])) == 1
    assert len(c.sample_units["ttfts_s"]) == len(c.ttfts_s) == 3
    assert len(c.sample_units["costs_usd"]) == 4

    # Rule checks: the unit of the request each verdict is about (kept with the verdict).
    checks = [
        CheckRecord(
            request_id=r.request_id, route="support-bot", target=r.target, arm=r.arm,
            rule="shipping", rule_version="v1", check="max-weight", result=result, reason="",
            created_at=at, sticky_unit=r.sticky_unit,
        )
        for r, result in [(primary[0], "fail"), (primary[1], "pass"), (primary[3], "pass"),
                          (primary[5], "error"), (canary[0], "pass"), (canary[1], "fail")]
    ]  # fmt: skip
    store.write_batch(checks)
    ep, ec = epoch_windows(windows, ARMS, Epoch("shipping", "v1", T0), T0)
    assert ep.checks == {"max-weight": (2, 4)} and ec.checks == {"max-weight": (1, 2)}
    assert sorted(ep.units["checks:max-weight"]) == [(0, 1), (1, 1), (1, 2)]
    assert ec.units["checks:max-weight"] == ((1, 2),)

    # Findings, pairs (agreement, noise) and the LLM judge's deltas.
    store.write_batch(
        [
            FindingRecord(
                request_id=primary[1].request_id, route="support-bot", target="prod",
                arm=Arm.PRIMARY, analyzer="tone", name="rude", created_at=at, severity="critical",
            )
        ]
    )  # fmt: skip
    fp, fc = with_findings(windows, ARMS, "warning", T0, p, c)
    assert fp.findings == (1, 6) and sorted(fp.units["findings"]) == [
        (0, 1),
        (0, 1),
        (0, 2),
        (1, 2),
    ]
    assert fc.units["findings"] == ((0, 2),)
    pairs = [
        *_judged_pair(-1.0, request_id=primary[1].request_id, pair_id="j1", sticky_unit=_user(1)),
        *_judged_pair(2.0, request_id=primary[2].request_id, pair_id="j2", sticky_unit=_user(1)),
        *_judged_pair(0.5, request_id=primary[3].request_id, pair_id="j3", sticky_unit=_user(2)),
        *_judged_pair(0.0, request_id="no-such-request", pair_id="j4"),
        *_judged_pair(0.0, request_id=primary[4].request_id, pair_id="n1", kind="noise",
                      candidate_target="prod", exact_equal=True, sticky_unit=_user(2)),
    ]  # fmt: skip
    store.write_batch(pairs)
    ap, ac = with_agreement(windows, ARMS, "exact", T0, p, c)
    assert ac.agreement == (4, 4) and sorted(ac.units["agreement"]) == [(1, 1), (1, 1), (2, 2)]
    assert ap.noise == (0, 1) and ap.units["noise"] == ((0, 1),)
    judged = with_judge_deltas(windows, ARMS, T0, c)
    assert judged.judge_deltas == (-1.0, 2.0, 0.5, 0.0)
    first, second, third, fourth = judged.sample_units["judge_deltas"]
    assert first == second and len({first, third, fourth}) == 3


def test_a_route_without_a_sticky_key_has_no_breakdowns(store: Store) -> None:
    at = T0 + timedelta(seconds=30)
    store.write_batch(
        [make_record(target="prod", arm=Arm.PRIMARY, started_at=at) for _ in range(5)]
        + [make_record(target="cand", arm=Arm.CANARY, started_at=at, status=Status.TIMEOUT)]
    )
    primary, candidate = traffic_windows(JudgeWindows(store), ARMS, T0)
    assert (primary.requests, candidate.errors) == (5, 1)
    assert (primary.units, primary.sample_units, candidate.units, candidate.sample_units) == (
        {}, {}, {}, {},
    )  # fmt: skip


def test_more_units_than_the_bound_are_merged_by_their_hash(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from proxy.rollout import evidence  # the module, to lower its bound

    monkeypatch.setattr(evidence, "MAX_UNIT_GROUPS", 16)
    at = T0 + timedelta(seconds=30)
    # 40 users whose units share 20 three-digit prefixes, two each.
    store.write_batch(
        [
            make_record(target="prod", arm=Arm.PRIMARY, started_at=at,
                        sticky_unit=f"{n:03x}{k:021x}")
            for n in range(20) for k in range(2)
        ]
    )  # fmt: skip
    primary, _ = traffic_windows(JudgeWindows(store), ARMS, T0)
    assert sorted(primary.units["errors"]) == [(0, 2)] * 20
    assert set(primary.sample_units["latencies_s"]) == set(range(20))  # merged, numbered anew


def test_probes_and_reviews_count_for_the_unit_of_the_live_request_they_came_from(
    store: Store,
) -> None:
    # Three live requests of two users (and one without a key), each mirrored and probed.
    units = {1: _user(1), 2: _user(1), 3: None}
    records: list[Any] = []
    for n, unit in units.items():
        records += [
            replace(r, sticky_unit=unit) if isinstance(r, ExchangeRecord) else r
            for r in shadow_pair(n)
        ]
    store.write_batch(records)
    probes = [
        ProbeRecord(
            probe_id=f"probe-{n}-{target}", request_id=f"req-{n}", route="support-bot",
            target=target, rule="shipping", rule_version="v1", created_at=T0 + timedelta(seconds=n),
            original_value="100", asked_value="150", result=result,
        )
        for n in units
        for target, result in (("prod", "followed"), ("cand", "stuck" if n < 3 else "followed"))
    ]  # fmt: skip
    store.write_batch(probes)
    windows = JudgeWindows(store)
    tallies = probe_tallies(ProbeStore(store), "shipping", ARMS, T0)
    baseline, candidate = adaptation_windows(windows, "shipping", ARMS, T0, tallies)
    assert baseline.adaptation == (0, 3) and sorted(baseline.units["adaptation"]) == [
        (0, 1),
        (0, 2),
    ]
    assert candidate.adaptation == (2, 3)
    assert sorted(candidate.units["adaptation"]) == [(0, 1), (2, 2)]

    reviews = ReviewStore(store)
    items = [queued(c) for c in reviews.candidates("support-bot", ANY_VERSION, since=T0)]
    reviews.enqueue(items)
    for item in items:
        reviews.add(review(item, "alice", "A"))
    reviewed = preference_window(reviews, windows, ARMS, T0)
    assert reviewed.preferences == (1.0, 1.0, 1.0)
    of = reviewed.sample_units["preferences"]
    order = [r.item.candidate.request_id for r in reviews.reviewed(route="support-bot")]
    assert of[order.index("req-1")] == of[order.index("req-2")] != of[order.index("req-3")]
