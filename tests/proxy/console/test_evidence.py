"""The answers behind a rollback's examples, read from a real SQLite store: the failing answer,
its failed checks, and the answer it is compared with."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from proxy.console.evidence import conversation_of, example_evidence
from proxy.core import Arm, CheckRecord, ExchangeRecord, Status
from proxy.store import Store
from tests.conftest import seed_sqlite

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MESSAGES = [{"role": "system", "content": "max_weight = 150"}, {"role": "user", "content": "?"}]


@pytest.fixture
def store(tmp_path: Path, migrated_sqlite: Path) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path / 'evidence.db'}"
    seed_sqlite(url, migrated_sqlite)
    with Store(url) as store:
        yield store


def exchange(request_id: str, arm: Arm, target: str, answer: str, **fields: Any) -> ExchangeRecord:
    values: dict[str, Any] = {
        "request_id": request_id, "route": "bot", "target": target, "upstream_model": target,
        "arm": arm, "endpoint": "chat.completions", "provider": "openai", "streamed": False,
        "started_at": NOW, "duration_s": 0.1, "ttft_s": None, "overhead_s": 0.0,
        "status": Status.OK, "http_status": 200, "rule": "shipping", "rule_version": "v2",
        "request_body": json.dumps({"model": target, "messages": MESSAGES}),
        "response_text": answer,
    }  # fmt: skip
    return ExchangeRecord(**{**values, **fields})


def check(request_id: str, arm: Arm, target: str, result: str) -> CheckRecord:
    return CheckRecord(
        request_id=request_id, route="bot", target=target, arm=arm, rule="shipping",
        rule_version="v2", check="max-weight", result=result, reason=f"{target} {result}",
        created_at=NOW,
    )  # fmt: skip


def test_a_canary_failure_is_compared_with_the_baseline_on_the_same_messages(store: Store) -> None:
    store.write_batch(
        [
            exchange("c1", Arm.CANARY, "stale", "100"),
            check("c1", Arm.CANARY, "stale", "fail"),
            # same messages, other model and options: comparable; the newest one is taken
            exchange("p1", Arm.PRIMARY, "good", "150", started_at=NOW - timedelta(minutes=2)),
            exchange("p2", Arm.PRIMARY, "good", "150!", started_at=NOW - timedelta(minutes=1)),
            check("p2", Arm.PRIMARY, "good", "pass"),
            # not comparable: other rule version, other messages, too long before
            exchange("p3", Arm.PRIMARY, "good", "v1", rule_version="v1"),
            exchange("p4", Arm.PRIMARY, "good", "other", request_body='{"messages": []}'),
            exchange("p5", Arm.PRIMARY, "good", "old", started_at=NOW - timedelta(hours=2)),
        ]
    )
    (found,) = example_evidence(store, "bot", ["c1"])
    assert found.failing is not None and found.failing.target == "stale"
    assert [c.result for c in found.failed_checks] == ["fail"]
    assert found.other is not None and found.other.request_id == "p2"
    assert found.other.response_text == "150!"
    assert not found.same_request
    assert [c.result for c in found.other_checks] == ["pass"]


def test_a_shadow_of_the_same_request_is_preferred(store: Store) -> None:
    store.write_batch(
        [
            exchange("g1", Arm.PRIMARY, "prod", "old rule"),
            exchange("g1", Arm.SHADOW, "cand", "new rule"),
            check("g1", Arm.PRIMARY, "prod", "fail"),
            check("g1", Arm.SHADOW, "cand", "pass"),
        ]
    )
    (found,) = example_evidence(store, "bot", ["g1"])
    assert found.failing is not None and found.failing.arm is Arm.PRIMARY
    assert found.other is not None and found.other.arm is Arm.SHADOW and found.same_request
    assert [c.reason for c in found.other_checks] == ["cand pass"]


def test_missing_requests_and_repeats_are_handled(store: Store) -> None:
    found = example_evidence(store, "bot", ["gone", "gone", *[f"x{i}" for i in range(9)]])
    assert [e.request_id for e in found] == ["gone", "x0", "x1", "x2", "x3"]
    assert all(e.failing is None and e.other is None for e in found)


def test_the_conversation_leaves_out_what_differs_per_target() -> None:
    one = json.dumps({"model": "a", "stream_options": {"x": 1}, "messages": MESSAGES})
    two = json.dumps({"model": "b", "messages": MESSAGES})
    assert conversation_of(one) == conversation_of(two) is not None
    assert conversation_of("not json") is None and conversation_of(None) is None
    assert conversation_of('{"prompt": "x"}') is None
