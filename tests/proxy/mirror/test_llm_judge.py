"""LLM-as-judge on shadow pairs: both orders judged and averaged, sampled, budgeted."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from proxy.mirror.llm_judge import parse_scores
from proxy.mock_upstream.server import MockUpstreamServer
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
