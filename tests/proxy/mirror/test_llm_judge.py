"""LLM-as-judge on shadow pairs: both orders judged and averaged, sampled, budgeted; its calls
recorded and counted as exchanges of arm `judge`; its scores in `mirrorgate_judge_score`."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta

import pytest

from analyzers.judge_prompt import parse_scores
from proxy.core.records import Arm, Status
from proxy.mock_upstream.server import MockUpstreamServer
from proxy.store.judge_windows import Arms, JudgeWindows
from tests.conftest import InProcessGateway, wait_until
from tests.proxy.mirror.test_analysis_plugins import stored_findings
from tests.proxy.mirror.test_shadow import ask, model, received, shadowed


def judged(upstream: MockUpstreamServer, **judge: object) -> dict[str, object]:
    extra = shadowed(upstream, [{"model": "cand-stale"}])
    extra["models"]["judge-model"] = model(upstream, "judge")  # type: ignore[index]
    extra["judge"] = {"model": "judge-model", "sample": 1.0, **judge}
    return extra


def test_both_orders_are_judged_and_averaged(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    gw = start_gateway(extra=judged(upstream))
    marker = uuid.uuid4().hex
    request_id = ask(gw, marker).headers["x-mirrorgate-request-id"]
    findings = wait_until(
        lambda: len(f := stored_findings(gw, request_id)) == 4 and f,
        what="four judge findings",
    )
    values = {f.name: f.value for f in findings}
    # The mock judge always prefers answer A (8 vs 5): averaged over both orders the two answers
    # tie, and the bias shows up as what it is.
    assert values == {
        "candidate_score": 6.5, "primary_score": 6.5, "score_delta": 0.0, "position_bias": 3.0,
    }  # fmt: skip
    assert all(f.analyzer == "judge" and f.pair_id for f in findings)
    judge_calls = [
        r for r in upstream.app.recorder.requests()
        if r["body"].get("model") == "judge" and marker in str(r["body"])
    ]  # fmt: skip
    assert len(judge_calls) == 2
    system = judge_calls[0]["body"]["messages"][0]["content"]
    assert "Do not reward length" in system
    first, second = (c["body"]["messages"][1]["content"] for c in judge_calls)
    assert first.index("You said") < first.index('{"max_weight": 100}')  # primary first
    assert second.index('{"max_weight": 100}') < second.index("You said")  # then candidate first
    assert received(upstream, marker)["judge"] == 2


def test_one_order_when_configured_asks_once_and_claims_no_position_bias(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    gw = start_gateway(extra=judged(upstream, both_orders=False))
    marker = uuid.uuid4().hex
    request_id = ask(gw, marker).headers["x-mirrorgate-request-id"]
    findings = wait_until(
        lambda: len(f := stored_findings(gw, request_id)) == 3 and f,
        what="three judge findings",
    )
    # Primary first only: the judge's preference for answer A stays in the scores.
    assert {f.name: f.value for f in findings} == {
        "candidate_score": 5.0, "primary_score": 8.0, "score_delta": -3.0,
    }  # fmt: skip
    assert all("primary first only" in (f.detail or "") for f in findings)
    assert received(upstream, marker)["judge"] == 1


def test_the_judge_budget_stops_judging(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    gw = start_gateway(extra=judged(upstream, max_usd_per_hour=1e-9))
    marker = uuid.uuid4().hex
    first = ask(gw, marker).headers["x-mirrorgate-request-id"]
    wait_until(lambda: len(stored_findings(gw, first)) == 4, what="judged")
    for _ in range(3):
        ask(gw, marker)
    wait_until(lambda: received(upstream, marker).get("stale") == 4, what="all shadows ran")
    wait_until(lambda: len(gw.gateway.shadows.tasks) == 0, what="shadows done")  # type: ignore[union-attr]
    assert received(upstream, marker)["judge"] == 2  # only the first pair was judged


def test_judge_calls_are_recorded_and_counted_as_the_judge_arm(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    gw = start_gateway(extra=judged(upstream))
    request_id = ask(gw, uuid.uuid4().hex).headers["x-mirrorgate-request-id"]
    wait_until(lambda: len(stored_findings(gw, request_id)) == 4, what="the pair judged")
    store = gw.gateway.store
    calls = wait_until(
        lambda: len(r := store.query(request_id=request_id, arm=Arm.JUDGE)) == 2 and r,
        what="both judge calls stored",
    )
    (shadow,) = store.query(request_id=request_id, arm=Arm.SHADOW)
    for call in calls:
        assert (call.route, call.target, call.status) == ("shadowed", "judge-model", Status.OK)
        assert call.pair_id == shadow.pair_id and call.tags == ("judge",)
        assert call.cost_usd > 0  # the judge model has a price
    registry = gw.gateway.registry
    judge = {"route": "shadowed", "target": "judge-model", "arm": "judge"}
    cost = registry.get_sample_value("mirrorgate_cost_usd_total", judge)
    assert cost == pytest.approx(sum(call.cost_usd for call in calls))
    requests = registry.get_sample_value(
        "mirrorgate_requests_total", {**judge, "status_class": "2xx"}
    )
    assert requests == 2
    assert registry.get_sample_value("mirrorgate_tokens_total", {**judge, "type": "input"})
    # Both sides of the pair observed on the 1-10 scale (the mock judge ties them at 6.5).
    for answer in ("candidate", "primary"):
        labels = {"route": "shadowed", "candidate": "cand-stale", "answer": answer}
        assert registry.get_sample_value("mirrorgate_judge_score_count", labels) == 1
        assert registry.get_sample_value("mirrorgate_judge_score_sum", labels) == 6.5
    # The rollout judge's traffic window sees the client's exchange only, never a judge call.
    since = calls[0].started_at - timedelta(minutes=1)
    window = JudgeWindows(store).exchanges(Arms("shadowed", "echo", "judge-model"), since)
    assert [row.arm for row in window] == [Arm.PRIMARY]


@pytest.mark.parametrize(
    ("text", "scores"),
    [
        ('{"score_a": 7, "score_b": 3}', (7.0, 3.0)),
        ('Sure! ```json\n{"score_a": 2, "score_b": 9, "reason": "B"}\n```', (2.0, 9.0)),
        ('{"score_a": 11, "score_b": 3}', None),
        ('{"score_a": "high"}', None),
        ("no scores at all", None),
    ],
)
def test_judge_answers_are_parsed_strictly(text: str, scores: tuple[float, float] | None) -> None:
    assert parse_scores(text) == scores
