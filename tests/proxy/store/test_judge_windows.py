"""The rows the rollout judge reads, on SQLite and PostgreSQL: only the compared arms, only the
window, corrections by the time and arm of the answer they are about, rule versions, the pairs'
stored agreement verdicts, the LLM judge's score deltas and the answers with severe findings."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from proxy.core.records import (
    Arm,
    CheckRecord,
    ExchangeRecord,
    FeedbackRecord,
    FindingRecord,
    PairRecord,
    Status,
)
from proxy.core.signals import is_correction
from proxy.store.exchanges import Store
from proxy.store.feedback import FeedbackStore, feedback_table, is_correction_clause
from proxy.store.judge_windows import (
    ArmExchange,
    Arms,
    Epoch,
    FindingCount,
    JudgeWindows,
    PairCount,
)
from proxy.store.rule_events import RuleEvent, RuleEventStore
from tests.proxy.store import test_exchanges as test_store
from tests.proxy.store.test_exchanges import T0, make_record

db_url = test_store.db_url
open_store = test_store.open_store

ARMS = Arms("support-bot", "prod", "cand")
AT = T0 + timedelta(seconds=30)


def correction(arm: Arm = Arm.CANARY, target: str = "cand", **fields: Any) -> FeedbackRecord:
    values: dict[str, Any] = {
        "request_id": f"req-{uuid.uuid4().hex[:8]}", "kind": "correction",
        "route": "support-bot", "target": target, "arm": arm, "created_at": AT, "corrected": True,
    }  # fmt: skip
    values.update(fields)
    return FeedbackRecord(**values)


def pair(kind: str, candidate: str, *, exact: bool, normalized: bool, json: bool | None,
         **fields: Any) -> PairRecord:  # fmt: skip
    values: dict[str, Any] = {
        "pair_id": uuid.uuid4().hex, "kind": kind, "request_id": uuid.uuid4().hex,
        "route": "support-bot", "primary_target": "prod", "candidate_target": candidate,
        "created_at": AT, "primary_status": "ok", "candidate_status": "ok",
        "exact_equal": exact, "normalized_equal": normalized, "json_equal": json,
    }  # fmt: skip
    values.update(fields)
    return PairRecord(**values)


def test_exchanges_are_the_compared_arms_in_the_window(open_store: Callable[..., Store]) -> None:
    store = open_store()
    store.write_batch(
        [
            make_record(target="prod", arm=Arm.PRIMARY, started_at=AT, duration_s=0.2),
            make_record(target="cand", arm=Arm.CANARY, started_at=AT, ttft_s=0.1, cost_usd=0.5),
            make_record(target="cand", arm=Arm.CANARY, started_at=T0 - timedelta(seconds=1)),
            make_record(target="cand", arm=Arm.SHADOW, started_at=AT),
            make_record(target="cand", arm=Arm.PRIMARY, started_at=AT),
            make_record(route="other", target="cand", arm=Arm.CANARY, started_at=AT),
        ]
    )
    rows = JudgeWindows(store).exchanges(ARMS, T0)
    assert sorted(rows, key=lambda r: r.arm) == [
        ArmExchange(Arm.CANARY, "ok", 0.25, 0.1, 0.5),
        ArmExchange(Arm.PRIMARY, "ok", 0.2, None, 0.0),
    ]


def test_corrections_count_each_arms_corrected_exchanges_that_started_in_the_window(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    late = AT + timedelta(minutes=10)  # feedback arrives long after the answer

    def served(arm: Arm, target: str, started_at: Any = AT, **fields: Any) -> str:
        record = make_record(target=target, arm=arm, started_at=started_at, **fields)
        store.write_batch([record])
        return record.request_id

    corrected = {
        # Two canary answers of the window, corrected (one only by a correction text).
        served(Arm.CANARY, "cand"): {},
        served(Arm.CANARY, "cand"): {"corrected": False, "correction": "150 kg"},
        # A primary answer of the window, corrected after the window's start and end alike.
        served(Arm.PRIMARY, "prod"): {},
        # Not corrections: the user said the answer was right; a score.
        served(Arm.PRIMARY, "prod"): {"corrected": False},
        served(Arm.CANARY, "cand"): {"kind": "score", "score": 1, "corrected": False},
        # A primary answer from before the window, whose correction arrives during it.
        served(Arm.PRIMARY, "prod", T0 - timedelta(seconds=1)): {},
        # A client that left is in no denominator, so in no numerator either.
        served(Arm.CANARY, "cand", status=Status.CLIENT_DISCONNECTED): {},
        # A shadow's answer (never served) and another route's.
        served(Arm.SHADOW, "cand"): {},
        served(Arm.CANARY, "cand", route="other"): {"route": "other"},
    }
    served(Arm.CANARY, "cand")  # an answer nobody corrected
    feedback = FeedbackStore(store)
    for request_id, fields in corrected.items():
        (exchange,) = store.query(request_id=request_id)
        values = {"request_id": request_id, "arm": exchange.arm, "target": exchange.target,
                  "created_at": late, **fields}  # fmt: skip
        assert feedback.add(correction(**values))
    assert JudgeWindows(store).corrections(ARMS, T0) == {Arm.CANARY: 2, Arm.PRIMARY: 1}


def test_one_caller_adds_at_most_the_cap_to_an_arms_corrections(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    feedback = FeedbackStore(store)

    def corrected_by(caller: str | None, arm: Arm = Arm.CANARY, target: str = "cand") -> None:
        record = make_record(target=target, arm=arm, started_at=AT)
        store.write_batch([record])
        assert feedback.add(
            correction(request_id=record.request_id, arm=arm, target=target, caller=caller)
        )

    for _ in range(71):  # the attack: one caller corrects every canary answer
        corrected_by("addr:0badc0de")
    for caller in ("app:1/user:a", "app:1/user:b", "app:1/user:c"):
        corrected_by(caller)
        corrected_by(caller)
    corrected_by(None)  # stored before callers were: counted alone
    corrected_by(None)
    for _ in range(7):
        corrected_by("addr:0badc0de", Arm.PRIMARY, "prod")
    windows = JudgeWindows(store)
    assert windows.corrections(ARMS, T0, per_caller=5) == {Arm.CANARY: 5 + 3 * 2 + 2,
                                                           Arm.PRIMARY: 5}  # fmt: skip
    assert windows.corrections(ARMS, T0, per_caller=1) == {Arm.CANARY: 1 + 3 + 2, Arm.PRIMARY: 1}
    assert windows.corrections(ARMS, T0) == {Arm.CANARY: 71 + 6 + 2, Arm.PRIMARY: 7}
    (stored,) = feedback.query(request_id=store.query(route="support-bot", limit=1)[0].request_id)
    assert stored.caller is not None and stored.caller.startswith(("addr:", "app:"))


def test_a_correction_counts_for_the_arm_that_served_the_answer(
    open_store: Callable[..., Store],
) -> None:
    # The primary failed over to the fallback: the user saw the fallback's answer, not the
    # primary's, although both exchanges carry the request id.
    store = open_store()
    primary = make_record(target="prod", arm=Arm.PRIMARY, status=Status.UPSTREAM_ERROR)
    fallback = make_record(request_id=primary.request_id, target="backup", arm=Arm.FALLBACK)
    store.write_batch([primary, fallback])
    assert FeedbackStore(store).add(
        correction(request_id=primary.request_id, arm=Arm.FALLBACK, target="backup")
    )
    assert JudgeWindows(store).corrections(ARMS, T0) == {}


FEEDBACK_SHAPES = [
    {"kind": kind, "corrected": corrected, "correction": text}
    for kind in ("correction", "score", "label")
    for corrected in (True, False)
    for text in (None, "", " ", "150 kg")
]


def test_the_sql_and_python_definitions_of_a_correction_agree(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    feedback = FeedbackStore(store)
    expected = set()
    for shape in FEEDBACK_SHAPES:
        record = correction(Arm.CANARY, "cand", **shape)
        assert feedback.add(record)
        if is_correction(record):
            expected.add(record.request_id)
    statement = sa.select(feedback_table.c.request_id).where(is_correction_clause())
    with store.engine.connect() as conn:
        found = {row[0] for row in conn.execute(statement)}
    assert found == expected
    assert len(expected) == 6  # kind correction: corrected, or a text of one character or more


def test_rule_versions_first_seen_newest_and_checked(open_store: Callable[..., Store]) -> None:
    store = open_store()
    windows = JudgeWindows(store)
    assert windows.newest_version("shipping") is None
    for version, seconds in (("v1", 0), ("v2", 60)):
        RuleEventStore(store).add(
            RuleEvent("shipping", version, None, T0 + timedelta(seconds=seconds), "r", "bot", None)
        )
    assert windows.newest_version("shipping") == Epoch("shipping", "v2", T0 + timedelta(minutes=1))
    assert windows.first_seen("shipping") == {"v1": T0, "v2": T0 + timedelta(minutes=1)}
    store.write_batch(
        [
            CheckRecord(
                request_id=f"r-{version}-{seconds}", route="support-bot", target=target, arm=arm,
                rule="shipping", rule_version=version, check="max-weight", result="pass",
                reason="", created_at=T0 + timedelta(seconds=seconds),
            )
            for version, target, arm, seconds in (
                ("v1", "prod", Arm.PRIMARY, 90), ("v1", "cand", Arm.CANARY, 80),
                ("v2", "cand", Arm.CANARY, 100), ("v3", "cand", Arm.SHADOW, 100),
                ("v0", "prod", Arm.PRIMARY, -10),
            )
        ]
    )  # fmt: skip
    assert windows.checked_versions(ARMS, "shipping", T0) == {
        "v1": T0 + timedelta(seconds=80),
        "v2": T0 + timedelta(seconds=100),
    }
    epoch = Epoch("shipping", "v1", T0)
    assert {(c.arm, c.result, c.count) for c in windows.check_counts(ARMS, epoch, T0)} == {
        (Arm.PRIMARY, "pass", 1),
        (Arm.CANARY, "pass", 1),
    }


def test_pairs_count_the_verdict_stored_with_them(open_store: Callable[..., Store]) -> None:
    store = open_store()
    store.write_batch(
        [
            # Worded differently, equal in the route's fields: the stored verdict says agree.
            pair("shadow", "cand", exact=False, normalized=False, json=False, agreement="agree"),
            pair("shadow", "cand", exact=True, normalized=True, json=True, agreement="disagree"),
            # The route's comparison does not apply (say, not JSON in a JSON mode): left out.
            pair(
                "shadow",
                "cand",
                exact=False,
                normalized=True,
                json=None,
                agreement="not_applicable",
            ),
            pair("noise", "prod", exact=False, normalized=False, json=None, agreement="agree"),
            pair(
                "shadow",
                "cand",
                exact=True,
                normalized=True,
                json=True,
                agreement="agree",
                candidate_status="error",
            ),
            pair(
                "shadow",
                "cand",
                exact=True,
                normalized=True,
                json=True,
                agreement="agree",
                primary_target="old",
            ),
        ]
    )
    windows = JudgeWindows(store)
    for mode in ("exact", "normalized", "json_fields", "numeric"):  # the verdict decides
        assert set(windows.pair_counts(ARMS, mode, T0)) == {
            PairCount("shadow", "cand", True, 1),
            PairCount("shadow", "cand", False, 1),
            PairCount("noise", "prod", True, 1),
        }


def test_pairs_stored_without_a_verdict_are_read_by_the_routes_mode(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    store.write_batch(
        [
            pair("shadow", "cand", exact=False, normalized=False, json=True),
            pair("shadow", "cand", exact=False, normalized=True, json=None),
            pair("noise", "prod", exact=True, normalized=True, json=None),
        ]
    )
    windows = JudgeWindows(store)

    def counts(mode: str) -> set[PairCount]:
        return set(windows.pair_counts(ARMS, mode, T0))

    assert counts("exact") == {
        PairCount("shadow", "cand", False, 2),
        PairCount("noise", "prod", True, 1),
    }
    assert counts("normalized") == {
        PairCount("shadow", "cand", False, 1),
        PairCount("shadow", "cand", True, 1),
        PairCount("noise", "prod", True, 1),
    }
    # No stored equality knows the route's fields and tolerance: such pairs are not judged.
    assert counts("json_fields") == set()
    assert counts("numeric") == set()


def finding(record: ExchangeRecord | PairRecord, name: str, **fields: Any) -> FindingRecord:
    """A finding on an exchange's answer, or (given a pair) the LLM judge's on that pair."""
    if isinstance(record, PairRecord):
        values: dict[str, Any] = {
            "request_id": record.request_id, "route": record.route,
            "target": record.candidate_target, "arm": Arm.SHADOW, "analyzer": "judge",
            "pair_id": record.pair_id,
        }  # fmt: skip
    else:
        values = {
            "request_id": record.request_id, "route": record.route, "target": record.target,
            "arm": record.arm, "analyzer": "refusal",
        }  # fmt: skip
    values.update({"name": name, "created_at": AT, **fields})
    return FindingRecord(**values)


def test_judge_deltas_are_the_candidates_shadow_pairs_against_the_baseline(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    first = pair("shadow", "cand", exact=True, normalized=True, json=None)
    second = pair("shadow", "cand", exact=True, normalized=True, json=None,
                  created_at=AT + timedelta(seconds=1))  # fmt: skip
    old = pair("shadow", "cand", exact=True, normalized=True, json=None,
               created_at=T0 - timedelta(seconds=1))  # fmt: skip
    other_candidate = pair("shadow", "cand-b", exact=True, normalized=True, json=None)
    other_baseline = pair("shadow", "cand", exact=True, normalized=True, json=None,
                          primary_target="old")  # fmt: skip
    unjudged = pair("shadow", "cand", exact=True, normalized=True, json=None)
    store.write_batch([first, second, old, other_candidate, other_baseline, unjudged])
    store.write_batch(
        [
            finding(second, "score_delta", value=1.5),
            finding(first, "score_delta", value=-2.0),
            finding(first, "candidate_score", value=4.0),  # the delta is what is read
            finding(old, "score_delta", value=9.0),
            finding(other_candidate, "score_delta", value=9.0),
            finding(other_baseline, "score_delta", value=9.0),
        ]
    )
    assert JudgeWindows(store).judge_deltas(ARMS, T0) == [-2.0, 1.5]  # oldest pair first
    assert JudgeWindows(store).judge_deltas(ARMS, AT + timedelta(seconds=1)) == [1.5]


def test_finding_counts_are_answers_of_each_compared_arm_with_a_severe_finding(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    refused = make_record(target="cand", arm=Arm.CANARY, started_at=AT)
    critical = make_record(target="cand", arm=Arm.CANARY, started_at=AT)
    mild = make_record(target="cand", arm=Arm.CANARY, started_at=AT)
    clean = make_record(target="cand", arm=Arm.CANARY, started_at=AT)
    failed = make_record(target="cand", arm=Arm.CANARY, started_at=AT, status=Status.TIMEOUT)
    old = make_record(target="cand", arm=Arm.CANARY, started_at=T0 - timedelta(seconds=1))
    primary = make_record(target="prod", arm=Arm.PRIMARY, started_at=AT)
    primary_clean = make_record(target="prod", arm=Arm.PRIMARY, started_at=AT)
    shadow = make_record(target="cand", arm=Arm.SHADOW, started_at=AT)
    store.write_batch([refused, critical, mild, clean, failed, old, primary, primary_clean, shadow])
    store.write_batch(
        [
            finding(refused, "refused", value=1.0, severity="warning"),
            finding(refused, "other", severity="critical"),  # one answer counts once
            finding(critical, "leak", severity="critical"),
            finding(mild, "chars", value=10.0, severity="info"),
            finding(clean, "chars", value=10.0),  # no severity: a measurement
            finding(failed, "refused", severity="warning"),  # not an answer
            finding(old, "refused", severity="warning"),  # before the window
            finding(primary, "refused", severity="warning"),
            finding(shadow, "refused", severity="warning"),  # not a compared arm
            # A finding on a pair is not about the canary's own answer.
            finding(clean, "refusal_differs", severity="warning", pair_id="p-1"),
        ]
    )
    windows = JudgeWindows(store)
    assert set(windows.finding_counts(ARMS, ["warning", "critical"], T0)) == {
        FindingCount(Arm.CANARY, 4, 2),
        FindingCount(Arm.PRIMARY, 2, 1),
    }
    assert set(windows.finding_counts(ARMS, ["critical"], T0)) == {
        FindingCount(Arm.CANARY, 4, 2),
        FindingCount(Arm.PRIMARY, 2, 0),
    }
    assert set(windows.finding_counts(ARMS, ["info", "warning", "critical"], T0)) == {
        FindingCount(Arm.CANARY, 4, 3),
        FindingCount(Arm.PRIMARY, 2, 1),
    }
