"""Building evaluation sets from a store seeded with traffic of known strata (SQLite and
PostgreSQL): proportions, the long tail, no duplicate, references as documented, no secret,
rotation with a disjoint held-out part."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from proxy.config import EvalSetSpec
from proxy.core import Arm, CheckRecord, FeedbackRecord, PairRecord
from proxy.replay.evalbuild import (
    allocate,
    build_set,
    content_hash,
    parse_request,
    read_previous,
    write_set,
)
from proxy.store import EvalStore, FeedbackStore, Store
from tests.proxy.store import test_exchanges as test_store
from tests.proxy.store.test_exchanges import make_record

db_url = test_store.db_url
open_store = test_store.open_store

NOW = datetime.now(UTC)
RECENT = NOW - timedelta(seconds=5)
SECRET = "sk-proj-abcdefghijklmnopqrstuvwx1234"
SPEC = EvalSetSpec(
    task="regex",
    tasks={"refund": "refund", "shipping": "parcel|ship", "legal": "lawyer"},
    min_per_task=5,
    held_out=0.1,
)
TASK_SHARES = {"refund": 120, "shipping": 70, "legal": 10}


def body(text: str, system: str = "max_weight = 150") -> str:
    return json.dumps(
        {
            "model": "support-bot",
            "stream": False,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": text},
            ],
        }
    )


def seed(store: Store) -> dict[str, str]:
    """200 answered requests: 120 refund, 70 shipping, 10 legal; every 10th refund has a
    correction, every 7th shipping a failed check, request 3 repeats request 1 (another
    spelling), request 5 carries a secret. Returns request id -> kind."""
    records: list[Any] = []
    kinds: dict[str, str] = {}
    n = 0
    for task, count in TASK_SHARES.items():
        for i in range(count):
            n += 1
            request_id = f"r-{task}-{i}"
            text = {
                "refund": f"I want a refund for order {i}",
                "shipping": f"Where is my parcel number {i}?",
                "legal": f"My lawyer asks about case {i}",
            }[task]
            if task == "refund" and i == 3:
                text = "  I WANT a refund for order 1 "  # a duplicate of refund 1
                kinds[request_id] = "duplicate"
            if task == "refund" and i == 5:
                text = f"refund me, my key is {SECRET}, mail jo@example.com"
                kinds[request_id] = "secret"
            answer = json.dumps({"order": i, "ok": True}) if task == "refund" else f"answer {i}"
            records.append(
                make_record(
                    request_id=request_id,
                    started_at=NOW - timedelta(hours=1, seconds=n),
                    rule="shipping-policy",
                    rule_version="v1",
                    request_body=body(text),
                    response_text=answer,
                )
            )
            if task == "shipping" and i % 7 == 0:
                kinds[request_id] = "failed_check"
                records.append(
                    CheckRecord(
                        request_id=request_id,
                        route="support-bot",
                        target="prod",
                        arm=Arm.PRIMARY,
                        rule="shipping-policy",
                        rule_version="v1",
                        check="max-weight",
                        result="fail",
                        reason="no",
                        created_at=NOW,
                    )
                )
    # An old request outside the window, and a shadow's answer: never drawn.
    records.append(make_record(request_id="old", started_at=NOW - timedelta(days=30),
                               request_body=body("refund old"), response_text="x"))  # fmt: skip
    records.append(make_record(request_id="shadow", arm=Arm.SHADOW, target="cand",
                               request_body=body("refund shadow"), started_at=RECENT))  # fmt: skip
    store.write_batch(records)
    feedback = FeedbackStore(store)
    for i in range(0, 120, 10):
        request_id = f"r-refund-{i}"
        kinds.setdefault(request_id, "correction")
        feedback.add(
            FeedbackRecord(
                request_id=request_id,
                kind="correction",
                route="support-bot",
                target="prod",
                arm=Arm.PRIMARY,
                created_at=NOW,
                corrected=True,
                correction=json.dumps({"order": i, "ok": False}),
            )
        )
    return kinds


def build(store: Store, size: int = 60, **kwargs: Any) -> Any:
    return build_set(
        EvalStore(store),
        name="support",
        route="support-bot",
        spec=kwargs.pop("spec", SPEC),
        bodies=kwargs.pop("bodies", "redacted"),
        since=NOW - timedelta(days=7),
        until=NOW,
        size=size,
        **kwargs,
    )


def test_a_set_has_the_proportions_the_long_tail_and_no_duplicate(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    seed(store)
    built = build(store)
    cases = built.cases
    assert len(cases) == 60
    tasks = Counter(c["task"] for c in cases)
    # legal is 5 % of traffic (3 of 60) but gets at least its min_per_task of 5; the rest is
    # shared in proportion to what is available (about 120 : 70 : 5).
    assert 5 <= tasks["legal"] <= 7
    assert 30 <= tasks["refund"] <= 39 and 17 <= tasks["shipping"] <= 25
    keys = [parse_request(json.dumps(c["input"])).key for c in [*cases, *built.held_out]]
    assert len(keys) == len(set(keys)), "a normalised prompt appears twice"
    ids = {c["source_request_id"] for c in [*cases, *built.held_out]}
    assert not ids & {"old", "shadow"}
    assert len(built.held_out) == 6 and not ids.isdisjoint(c["source_request_id"] for c in cases)
    manifest = built.manifest
    assert manifest["counts"]["task"] == dict(sorted(tasks.items()))
    assert manifest["content_hash"] == content_hash(cases)
    assert manifest["version"] == 1 and manifest["window"]["until"]


def test_references_follow_correction_then_passing_answer_then_review(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    kinds = seed(store)
    built = build(store, size=150, spec=SPEC.model_copy(update={"held_out": 0.0}))
    seen = Counter()
    for case in built.cases:
        kind = kinds.get(case["source_request_id"])
        seen[case["reference"]] += 1
        if kind == "correction":
            assert case["reference"] == "correction"
            assert case["expect"]["json"]["ok"] is False  # the user's answer, scored as JSON
            assert case["difficulty"] == "hard"  # a corrected answer is hard
        elif kind == "failed_check":
            assert case["reference"] == "review"
            assert case["score"] == "judge" and case["rubric"] and "expect" not in case
        else:
            assert case["reference"] == "primary_passed"
            assert case["route"] == "support-bot"
    assert seen["correction"] and seen["review"] and seen["primary_passed"]
    assert built.manifest["counts"]["reference"] == dict(sorted(seen.items()))


def test_no_secret_leaves_the_store_unredacted(
    open_store: Callable[..., Store], tmp_path: Path
) -> None:
    store = open_store()
    seed(store)
    # Everything, so that the request with the secret is surely in.
    built = build(store, size=300, spec=SPEC.model_copy(update={"held_out": 0.0}))
    write_set(tmp_path / "support", built)
    text = "".join(p.read_text() for p in (tmp_path / "support").iterdir())
    assert "r-refund-5" in text
    assert SECRET not in text and "jo@example.com" not in text
    assert "[REDACTED:openai_key]" in text
    # `full` keeps bodies as received, as the store itself would.
    full = build(store, size=300, bodies="full", spec=SPEC.model_copy(update={"held_out": 0.0}))
    assert SECRET in json.dumps(full.cases)


def test_rotation_replaces_a_share_and_keeps_the_held_out_part_disjoint(
    open_store: Callable[..., Store], tmp_path: Path
) -> None:
    store = open_store()
    seed(store)
    directory = tmp_path / "support"
    write_set(directory, build(store, size=40))
    first = read_previous(directory)
    assert first is not None
    rotated = build(store, size=40, previous=first, rotate=0.25)
    write_set(directory, rotated)
    before = {c["source_request_id"] for c in first.cases}
    after = {c["source_request_id"] for c in rotated.cases}
    held = {c["source_request_id"] for c in rotated.held_out}
    assert len(rotated.cases) == 40
    assert len(before & after) == 30  # 1 - 0.25 kept
    assert held == {c["source_request_id"] for c in first.held_out}  # the held-out part stays
    assert held.isdisjoint(after) and held.isdisjoint(before)
    lineage = rotated.manifest["lineage"]
    assert [step["version"] for step in lineage] == [1, 2]
    assert lineage[1]["parent_hash"] == first.manifest["content_hash"]
    assert (lineage[1]["kept"], lineage[1]["retired"], lineage[1]["added"]) == (30, 10, 10)
    assert rotated.manifest["version"] == 2
    # Retired cases never come back in a later rotation.
    again = build(store, size=40, previous=read_previous(directory), rotate=0.5)
    retired = before - after
    assert retired.isdisjoint(c["source_request_id"] for c in again.cases)


def test_an_edited_set_is_not_rotated(open_store: Callable[..., Store], tmp_path: Path) -> None:
    store = open_store()
    seed(store)
    directory = tmp_path / "support"
    write_set(directory, build(store, size=20))
    with (directory / "cases.jsonl").open("a") as cases:
        cases.write('{"id": "sneaked-in", "input": "x", "expect": "y"}\n')
    with pytest.raises(Exception, match="content hash"):
        read_previous(directory)


def test_difficulty_marks_rare_versions_as_edge_and_long_prompts_as_hard(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    records = [
        make_record(
            request_id=f"a-{i}",
            rule="r",
            rule_version="v1",
            started_at=RECENT,
            request_body=body(f"short {i}"),
            response_text="ok",
        )
        for i in range(98)
    ]
    records.append(make_record(request_id="rare", rule="r", rule_version="v0", started_at=RECENT,
                               request_body=body("old rule"), response_text="ok"))  # fmt: skip
    records.append(make_record(request_id="long", rule="r", rule_version="v1", started_at=RECENT,
                               request_body=body("x " * 1500), response_text="ok"))  # fmt: skip
    store.write_batch(records)
    store.write_batch(
        [
            PairRecord(
                pair_id="p1",
                kind="shadow",
                request_id="a-1",
                route="support-bot",
                primary_target="prod",
                candidate_target="cand",
                created_at=NOW,
                primary_status="ok",
                candidate_status="ok",
                exact_equal=False,
                normalized_equal=False,
                json_equal=None,
                agreement="disagree",
            )
        ]
    )
    built = build(store, size=100, spec=EvalSetSpec(held_out=0.0))
    by_id = {c["source_request_id"]: c["difficulty"] for c in built.cases}
    assert by_id["rare"] == "edge"
    assert by_id["long"] == "hard"
    assert by_id["a-1"] == "hard"  # a shadow disagreed
    assert by_id["a-2"] == "easy"
    assert built.manifest["traffic"]["rare"] == ["v0"]


def test_task_classifiers_read_a_body_field_the_recorded_header_and_the_rule_version(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    payload = json.loads(body("hello"))
    payload["metadata"] = {"task": "billing/EU"}
    store.write_batch(
        [
            make_record(
                request_id="b",
                started_at=RECENT,
                rule_version="v2",
                tags=("task:faq",),
                request_body=json.dumps(payload),
                response_text="ok",
            ),
        ]
    )
    for form, expected in (("body:metadata.task", "billing_EU"), ("header:x-task", "faq"),
                           ("rule", "v2"), ("body:nothing", "other")):  # fmt: skip
        built = build(store, size=5, spec=EvalSetSpec(task=form, held_out=0.0))
        assert [c["task"] for c in built.cases] == [expected], form


def test_allocation_gives_the_tail_its_minimum_and_never_more_than_available() -> None:
    assert allocate({"a": 100, "b": 50, "c": 2}, 30, 5) == {"a": 19, "b": 9, "c": 2}
    assert sum(allocate({"a": 7, "b": 3}, 100, 5).values()) == 10
    assert allocate({"a": 1, "b": 9, "c": 5}, 2, 5) == {"a": 0, "b": 1, "c": 1}


def test_a_store_without_bodies_is_refused(open_store: Callable[..., Store]) -> None:
    with pytest.raises(Exception, match=r"store\.bodies is none"):
        build(open_store(), bodies="none")


def test_sampling_stays_in_the_database(open_store: Callable[..., Store]) -> None:
    """Rows come back at about their rate, never the whole window."""
    store = open_store()
    store.write_batch(
        [
            make_record(request_id=f"s-{i}", started_at=RECENT, request_body=body(f"q {i}"))
            for i in range(2000)
        ]
    )
    drawn = EvalStore(store).sample("support-bot", NOW - timedelta(1), NOW + timedelta(1),
                                    {"": 0.1})  # fmt: skip
    assert 120 <= len(drawn) <= 280
