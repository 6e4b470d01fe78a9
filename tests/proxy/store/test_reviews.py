"""Blind review in the store: pairs queued once, joined to both exchanges, a reviewer never
offered the same item twice, one review per (item, reviewer), second reviews first, the texts
read from the exchanges by side, the reviews read back for agreement and the judge, and each
item's tally of reviews kept with it so the queue reads only the open items; on SQLite and
PostgreSQL."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

from proxy.core import Arm, ExchangeRecord, PairRecord, Status
from proxy.store import (
    ANY_VERSION,
    ReviewCandidate,
    ReviewItem,
    ReviewRecord,
    ReviewStore,
    experiment_arm_of,
    experiment_side,
)
from proxy.store.exchanges import Store
from tests.conftest import seed_sqlite, sqlite_plans
from tests.proxy.store import test_exchanges as test_store
from tests.proxy.store.test_exchanges import T0, make_record

db_url = test_store.db_url
open_store = test_store.open_store


def shadow_pair(
    n: int,
    *,
    route: str = "support-bot",
    primary: str = "prod",
    candidate: str = "cand",
    version: str | None = "v1",
    agreement: str = "agree",
    live_arm: Arm = Arm.PRIMARY,
    bodies: bool = True,
    status: Status = Status.OK,
    answers: tuple[str, str] | None = None,
    start: datetime = T0,
) -> list[ExchangeRecord | PairRecord]:
    """The records of one mirrored request: the live answer, the shadow's and their pair."""
    request_id, pair_id = f"req-{n}", f"pair-{n}"
    at = start + timedelta(seconds=n)
    live_text, shadow_text = answers or (f"live answer {n}", f"shadow answer {n}")
    body = json.dumps({"model": route, "messages": [{"role": "user", "content": f"question {n}"}]})
    live = make_record(
        request_id=request_id, route=route, target=primary, arm=live_arm, started_at=at,
        rule="policy" if version else None, rule_version=version,
        request_body=body if bodies else None, response_text=live_text if bodies else None,
    )  # fmt: skip
    shadow = make_record(
        request_id=request_id, route=route, target=candidate, arm=Arm.SHADOW, started_at=at,
        pair_id=pair_id, status=status, rule="policy" if version else None,
        rule_version=version, request_body=body if bodies else None,
        response_text=shadow_text if bodies else None,
    )  # fmt: skip
    pair = PairRecord(
        pair_id=pair_id, kind="shadow", request_id=request_id, route=route,
        primary_target=primary, candidate_target=candidate, created_at=at,
        primary_status="ok", candidate_status=status.value, exact_equal=False,
        normalized_equal=False, json_equal=None, agreement=agreement,
    )  # fmt: skip
    return [live, shadow, pair]


def queued(candidate: ReviewCandidate, *, shown_as: str = "A", wanted: int = 1) -> ReviewItem:
    return ReviewItem(
        item_id=secrets.token_hex(16),
        candidate=candidate,
        candidate_shown_as=shown_as,  # type: ignore[arg-type]
        wanted_reviews=wanted,
        weight=1.0,
        why="plain",
        created_at=T0,
    )


def review(
    item: ReviewItem, reviewer: str, preference: str = "A", **fields: object
) -> ReviewRecord:
    return ReviewRecord(
        item_id=item.item_id, reviewer_id=reviewer, created_at=T0 + timedelta(minutes=1),
        score_a=fields.pop("score_a", 4), score_b=fields.pop("score_b", 2),  # type: ignore[arg-type]
        preference=preference, **fields,  # type: ignore[arg-type]
    )  # fmt: skip


def test_candidates_are_shadow_pairs_with_both_answers_stored_not_yet_queued(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    store.write_batch(
        shadow_pair(1)
        + shadow_pair(2, version="v2", agreement="disagree", live_arm=Arm.CANARY)
        + shadow_pair(3, bodies=False)
        + shadow_pair(4, status=Status.UPSTREAM_ERROR)
        + shadow_pair(5, route="other")
    )
    reviews = ReviewStore(store)
    found = reviews.candidates("support-bot", ANY_VERSION, since=T0)
    assert [c.pair_id for c in found] == ["pair-2", "pair-1"]  # newest first
    two = found[0]
    assert (two.primary_arm, two.candidate_arm, two.agreement) == ("canary", "shadow", "disagree")
    assert (two.rule, two.rule_version) == ("policy", "v2")
    assert [c.pair_id for c in reviews.candidates("support-bot", "v1", since=T0)] == ["pair-1"]
    assert reviews.candidates("support-bot", ANY_VERSION, since=T0 + timedelta(seconds=2)) == [two]

    assert reviews.enqueue([queued(found[1]), queued(found[1])]) == 1  # a pair is queued once
    assert [c.pair_id for c in reviews.candidates("support-bot", ANY_VERSION, since=T0)] == [
        "pair-2"
    ]
    # one of a batch already queued (by another replica, say): the others still go in
    assert reviews.enqueue([queued(found[1]), queued(two)]) == 1
    assert reviews.candidates("support-bot", ANY_VERSION, since=T0) == []


def test_texts_come_from_both_exchanges_by_the_side_each_is_shown_on(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    store.write_batch(shadow_pair(1, answers=("from prod", "from cand")))
    reviews = ReviewStore(store)
    (candidate,) = reviews.candidates("support-bot", ANY_VERSION, since=T0)
    left, right = queued(candidate, shown_as="A"), queued(candidate, shown_as="B")
    reviews.enqueue([left])
    texts = reviews.texts(left)
    assert texts is not None
    assert (texts.answer_a, texts.answer_b) == ("from cand", "from prod")
    assert '"question 1"' in texts.request_body
    flipped = reviews.texts(right)
    assert flipped is not None and (flipped.answer_a, flipped.answer_b) == (
        "from prod",
        "from cand",
    )
    assert reviews.item(left.item_id) == left
    assert reviews.item("nope") is None


def test_a_reviewer_is_never_offered_an_item_twice_and_second_reviews_come_first(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    store.write_batch(shadow_pair(1) + shadow_pair(2) + shadow_pair(3))
    reviews = ReviewStore(store)
    c3, c2, c1 = reviews.candidates("support-bot", ANY_VERSION, since=T0)
    one, two, three = queued(c1), queued(c2, wanted=2), queued(c3)
    reviews.enqueue([one, two, three])

    assert reviews.next_item("support-bot", ANY_VERSION, "alice") == one  # the oldest
    assert reviews.add(review(one, "alice"))
    assert not reviews.add(review(one, "alice", "B"))  # one review per (item, reviewer)
    assert reviews.next_item("support-bot", ANY_VERSION, "alice") == two
    assert reviews.add(review(two, "alice"))
    # bob gets the item waiting for its second review before the older-but-unseen ones
    assert reviews.next_item("support-bot", ANY_VERSION, "bob") == two
    assert reviews.add(ReviewRecord(two.item_id, "bob", T0, skipped=True))
    assert reviews.next_item("support-bot", ANY_VERSION, "bob") == three  # one is done
    assert reviews.open_count("support-bot", ANY_VERSION, "bob") == 1
    assert reviews.add(review(three, "alice"))
    assert reviews.next_item("support-bot", ANY_VERSION, "alice") is None
    assert reviews.next_item("support-bot", "v9", "carol") is None
    # bob's skip did not count: the item still wants its second review, from someone else
    assert reviews.next_item("support-bot", ANY_VERSION, "carol") == two

    (count,) = reviews.queues()
    assert (count.route, count.rule_version, count.open, count.reviews) == (
        "support-bot", "v1", 1, 3,
    )  # fmt: skip


def test_reviews_read_back_with_their_items_and_the_candidates_preference(
    open_store: Callable[..., Store],
) -> None:
    store = open_store(bodies="redacted")
    store.write_batch(shadow_pair(1) + shadow_pair(2) + shadow_pair(3, candidate="other"))
    reviews = ReviewStore(store)
    c3, c2, c1 = reviews.candidates("support-bot", ANY_VERSION, since=T0)
    left, right, elsewhere = queued(c1, shown_as="A"), queued(c2, shown_as="B"), queued(c3)
    reviews.enqueue([left, right, elsewhere])
    key = "sk-" + "a" * 40
    reviews.add(review(left, "alice", "A", reason=f"leaks {key}"))
    reviews.add(review(right, "alice", "A"))
    reviews.add(review(elsewhere, "alice", "tie"))
    reviews.add(ReviewRecord(right.item_id, "bob", T0, skipped=True))

    got = reviews.reviewed(route="support-bot", targets=("prod", "cand"))
    assert [r.item.item_id for r in got] == [left.item_id, right.item_id]
    # shown as A and preferred: 1; the primary shown as A and preferred: 0
    assert [r.candidate_preference for r in got] == [1.0, 0.0]
    assert got[0].review.reason is not None and key not in got[0].review.reason
    assert got[0].review.score_a == 4 and got[0].review.preference == "A"
    assert [r.candidate_preference for r in reviews.reviewed(targets=("prod", "other"))] == [0.5]
    assert len(reviews.reviewed(include_skips=True)) == 4
    assert [r.item.item_id for r in reviews.reviewed(since=T0 + timedelta(seconds=2))] == [
        right.item_id,
        elsewhere.item_id,
    ]


def test_nothing_is_reviewable_without_bodies(open_store: Callable[..., Store]) -> None:
    store = open_store(bodies="none")
    assert not ReviewStore(store).keeps_bodies
    assert ReviewStore(open_store()).keeps_bodies


def experiment_pair(n: int, arm: str, **fields: object) -> list[ExchangeRecord | PairRecord]:
    """`shadow_pair` whose live answer an experiment arm served."""
    live, shadow, pair = shadow_pair(n, live_arm=Arm.EXPERIMENT, **fields)  # type: ignore[arg-type]
    assert isinstance(live, ExchangeRecord)
    return [replace(live, experiment_arm=arm), shadow, pair]


def test_experiment_candidates_are_the_pairs_an_experiment_arm_answered_live(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    store.write_batch(
        shadow_pair(1)
        + experiment_pair(2, "control", answers=("from control", "from the shadow"))
        + experiment_pair(3, "control", bodies=False)
        + shadow_pair(4, live_arm=Arm.EXPERIMENT)  # no arm recorded: not an experiment's pair
    )
    reviews = ReviewStore(store)
    assert [c.pair_id for c in reviews.candidates("support-bot", ANY_VERSION, since=T0)] == [
        "pair-1"
    ]  # the shadow source keeps to the live arms it knows
    (found,) = reviews.experiment_candidates("support-bot", ANY_VERSION, since=T0)
    assert (found.pair_id, found.source) == ("pair-2", "experiment")
    assert (found.primary_arm, found.candidate_arm) == ("experiment:control", "shadow")
    assert experiment_arm_of(found.primary_arm) == "control"
    assert experiment_arm_of("shadow") is None and experiment_side("b") == "experiment:b"
    item = queued(replace(found, candidate_arm=experiment_side("b")), shown_as="B")
    assert reviews.enqueue([item]) == 1
    assert reviews.item(item.item_id) == item  # both arms kept with the item
    texts = reviews.texts(item)
    assert texts is not None and (texts.answer_a, texts.answer_b) == (
        "from control",
        "from the shadow",
    )
    assert reviews.experiment_candidates("support-bot", ANY_VERSION, since=T0) == []


def test_each_review_is_counted_with_its_item_and_closes_it_once_enough_arrive_at_once(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    store.write_batch(shadow_pair(1) + shadow_pair(2))
    reviews = ReviewStore(store)
    c2, c1 = reviews.candidates("support-bot", ANY_VERSION, since=T0)
    single, double = queued(c1), queued(c2, wanted=2)
    reviews.enqueue([single, double])
    # eight reviewers at once on the item that wants two, and a skip: every review is counted
    who = [f"r{n}" for n in range(8)]
    with ThreadPoolExecutor(len(who) + 1) as pool:
        stored = list(pool.map(lambda r: reviews.add(review(double, r)), who))
        assert pool.submit(reviews.add, replace(review(double, "s"), skipped=True)).result()
    assert all(stored)
    (count,) = reviews.queues()
    assert (count.open, count.reviews) == (1, 8)  # the double is closed; the single is open
    assert reviews.next_item("support-bot", ANY_VERSION, "carol") == single
    assert reviews.open_count("support-bot", ANY_VERSION, "carol") == 1
    assert reviews.add(review(single, "carol"))
    assert reviews.next_item("support-bot", ANY_VERSION, "dave") is None
    assert reviews.open_count("support-bot", ANY_VERSION, "dave") == 0
    (count,) = reviews.queues()
    assert (count.open, count.reviews) == (0, 9)


def test_the_next_item_is_read_from_the_open_items_index_not_the_reviews_history(
    tmp_path: Path, migrated_sqlite: Path
) -> None:
    """A reviewer's next item and the count of what is left read the open items through their
    index, never every item the route ever queued (which retention does not shorten)."""
    url = f"sqlite:///{tmp_path / 'plan.db'}"
    seed_sqlite(url, migrated_sqlite)
    store = Store(url)
    try:
        reviews = ReviewStore(store)
        (item, left), plans = sqlite_plans(
            store.engine,
            lambda: (
                reviews.next_item("support-bot", ANY_VERSION, "alice"),
                reviews.open_count("support-bot", ANY_VERSION, "alice"),
            ),
            reading="FROM review_items",
        )
        assert (item, left) == (None, 0) and len(plans) == 2
        for plan in plans:
            assert any("USING INDEX ix_review_items_open" in line for line in plan), plan
            assert not any(line.startswith("SCAN review_items") for line in plan), plan
    finally:
        store.close()


def test_items_past_retention_are_closed_and_their_reviews_kept(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    old_start = T0 - timedelta(days=20)
    store.write_batch(shadow_pair(1, start=old_start) + shadow_pair(2))
    reviews = ReviewStore(store)
    young_c, old_c = reviews.candidates("support-bot", ANY_VERSION, since=old_start)
    old, young = queued(old_c, wanted=2), queued(young_c)
    reviews.enqueue([old, young])
    assert reviews.add(review(old, "alice"))  # one of the two reviews it wants
    assert reviews.next_item("support-bot", ANY_VERSION, "bob") == old  # a second review first

    assert reviews.close_older_than(T0 - timedelta(days=14)) == 1
    assert reviews.close_older_than(T0 - timedelta(days=14)) == 0
    assert reviews.next_item("support-bot", ANY_VERSION, "bob") == young
    assert reviews.open_count("support-bot", ANY_VERSION, "bob") == 1
    (count,) = reviews.queues()
    assert (count.open, count.reviews) == (1, 1)
    (kept,) = reviews.reviewed(route="support-bot")
    assert (kept.item.item_id, kept.review.reviewer_id) == (old.item_id, "alice")
