"""An operation's summary from its calls: client calls and judge calls are its cost, shadows and
probes apart; calls read twice (store and memory) count once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from proxy.core import OperationCall, OutcomeRecord, merged_calls, summarize

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def call(request: str, arm: str, at: float, cost: float, **changes: object) -> OperationCall:
    fields: dict[str, object] = {
        "request_id": request, "route": "bot", "target": "prod", "arm": arm, "served_as": arm,
        "started_at": T0 + timedelta(seconds=at), "duration_s": 1.0, "ok": True, "cost_usd": cost,
    }  # fmt: skip
    fields.update(changes)
    return OperationCall(**fields)  # type: ignore[arg-type]


def test_a_call_seen_in_the_store_and_in_memory_counts_once() -> None:
    stored = [call("a", "primary", 0, 0.01), call("a", "judge", 2, 0.001, target="judge")]
    recent = [call("a", "primary", 0, 0.01), call("b", "canary", 5, 0.02)]
    calls = merged_calls(stored, recent)
    assert [c.request_id for c in calls] == ["a", "a", "b"]
    summary = summarize("op", calls)
    assert summary.calls == 2
    assert summary.cost_usd == pytest.approx(0.031)
    assert summary.arms == ("primary", "canary")
    assert summary.latency_s == pytest.approx(6.0)  # b ends at 6 s


def test_the_experiment_arm_is_the_operations_arm_when_a_call_has_one() -> None:
    summary = summarize("op", [call("a", "primary", 0, 0.0, served_as="cheaper")])
    assert (summary.arm, summary.arms) == ("cheaper", ("cheaper",))


def test_an_error_answer_is_the_fallbacks_when_the_request_was_tried_twice() -> None:
    failed_then_saved = [call("a", "primary", 0, 0, ok=False), call("a", "fallback", 0, 0.01)]
    failed_twice = [call("b", "canary", 1, 0, ok=False), call("b", "fallback", 1, 0, ok=False)]
    summary = summarize("op", [*failed_then_saved, *failed_twice])
    assert (summary.requests, summary.calls, summary.fallbacks, summary.errors) == (2, 4, 2, 1)


def test_outcomes_are_kept_oldest_first_and_found_by_kind() -> None:
    late = OutcomeRecord("op", "adopted", "app:x", T0 + timedelta(minutes=1), flag=False)
    early = OutcomeRecord("op", "completed", "app:x", T0, flag=True)
    summary = summarize("op", [], [late, early])
    assert summary.outcomes == (early, late)
    assert summary.outcome("adopted") == late
    assert summary.outcome("corrected") is None
    assert summary.route is None and summary.latency_s is None
