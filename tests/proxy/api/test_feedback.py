"""POST /v1/feedback: joined to the exchange, idempotent per kind, counted, bad input refused."""

from __future__ import annotations

import gc
from collections.abc import Callable

import pytest

from proxy.api.feedback import RecentExchanges, ServedAnswer
from proxy.core.records import Arm
from proxy.store.feedback import FeedbackStore
from tests.conftest import InProcessGateway, wait_until
from tests.proxy.gateway.test_exchange_openai import MESSAGES
from tests.proxy.store.test_exchanges import make_record


def answer(gw: InProcessGateway) -> str:
    response = gw.http.post("/v1/chat/completions", json={"model": "echo", "messages": MESSAGES})
    return response.headers["x-mirrorgate-request-id"]


def feedback_total(gw: InProcessGateway, kind: str) -> float:
    value = gw.gateway.registry.get_sample_value(
        "mirrorgate_feedback_total",
        {"route": "echo", "target": "echo", "arm": "primary", "kind": kind},
    )
    return value or 0.0


def test_feedback_joins_the_exchange_and_is_idempotent(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway()
    request_id = answer(gw)  # feedback may arrive before the recorder wrote the exchange
    body = {"request_id": request_id, "corrected": True, "correction": "150", "score": 1}
    first = gw.http.post("/v1/feedback", json=body)
    assert first.status_code == 201
    assert first.json() == {"request_id": request_id, "recorded": ["correction", "score"],
                            "duplicates": []}  # fmt: skip
    again = gw.http.post("/v1/feedback", json={**body, "label": "wrong-policy"})
    assert again.json()["recorded"] == ["label"]
    assert again.json()["duplicates"] == ["correction", "score"]
    stored = FeedbackStore(gw.gateway.store).query(request_id=request_id)
    assert sorted(f.kind for f in stored) == ["correction", "label", "score"]
    correction = next(f for f in stored if f.kind == "correction")
    assert correction.corrected and correction.correction == "150"
    assert (correction.route, correction.target, correction.arm) == ("echo", "echo", Arm.PRIMARY)
    assert feedback_total(gw, "correction") == 1
    assert feedback_total(gw, "negative") == 1
    assert feedback_total(gw, "positive") == 0


def test_feedback_for_a_written_exchange_after_a_restart_of_the_cache(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway()
    request_id = answer(gw)
    wait_until(lambda: gw.gateway.store.query(request_id=request_id), what="the exchange written")
    gw.gateway.recent._by_id.clear()  # as after a restart: the join must come from the store
    response = gw.http.post("/v1/feedback", json={"request_id": request_id, "score": 5})
    assert response.status_code == 201 and response.json()["recorded"] == ["score"]
    assert feedback_total(gw, "positive") == 1


@pytest.mark.parametrize(
    ("said", "is_correction"),
    [
        ({"corrected": True}, True),
        ({"correction": "150 kg"}, True),
        ({"corrected": False, "correction": "150 kg"}, True),
        ({"corrected": False}, False),
        ({"correction": ""}, False),
        ({"corrected": False, "correction": ""}, False),
    ],
)
def test_a_correction_is_corrected_true_or_a_correction_text(
    start_gateway: Callable[..., InProcessGateway], said: dict[str, object], is_correction: bool
) -> None:
    gw = start_gateway()
    request_id = answer(gw)
    response = gw.http.post("/v1/feedback", json={"request_id": request_id, **said})
    assert response.status_code == 201 and response.json()["recorded"] == ["correction"]
    (stored,) = FeedbackStore(gw.gateway.store).query(request_id=request_id)
    assert stored.corrected is is_correction
    assert feedback_total(gw, "correction") == (1 if is_correction else 0)


@pytest.mark.parametrize(
    ("content", "status", "message"),
    [
        (b'{"request_id": "nope", "score": 3}', 404, "no exchange with request id"),
        (b'{"request_id": "x"}', 400, "give at least one of"),
        (b'{"request_id": "x", "score": 9}', 400, "score"),
        (b'{"request_id": "x", "score": "5"}', 400, "score"),
        (b'{"request_id": "x", "score": 3, "admin": true}', 400, "admin"),
        (b'{"request_id": ', 400, "not valid JSON"),
        (b'["request_id"]', 400, "malformed"),
        (b'{"request_id": "' + b"x" * 200 + b'", "score": 3}', 400, "request_id"),
        (b'{"request_id": "x", "label": "' + b"y" * (2 * 1024 * 1024) + b'"}', 413, "larger"),
    ],
)
def test_bad_feedback_is_refused_and_changes_nothing(
    start_gateway: Callable[..., InProcessGateway], content: bytes, status: int, message: str
) -> None:
    gw = start_gateway()
    response = gw.http.post(
        "/v1/feedback", content=content, headers={"content-type": "application/json"}
    )
    assert response.status_code == status
    assert message in response.json()["error"]["message"]
    assert FeedbackStore(gw.gateway.store).query() == []


def test_feedback_needs_json(start_gateway: Callable[..., InProcessGateway]) -> None:
    gw = start_gateway()
    response = gw.http.post("/v1/feedback", content=b"score=5")
    assert response.status_code == 415


def test_the_recent_answers_cost_the_cycle_collector_nothing() -> None:
    # 20,000 of them live in every gateway: were they tracked, every full collection would walk
    # them all (the pause `mirrorgate_gc_pause_seconds` shows), start-up freeze or not.
    recent = RecentExchanges(size=3)
    for n in range(5):
        recent(make_record(request_id=f"req-{n}", arm=Arm.CANARY, rule="shipping"))
    recent(make_record(request_id="shadowed", arm=Arm.SHADOW))
    gc.collect()
    assert not any(gc.is_tracked(kept) for kept in recent._by_id.values())
    assert list(recent._by_id) == ["req-2", "req-3", "req-4"]  # the oldest forgotten first
    assert recent.get("req-0") is None and recent.get("shadowed") is None
    assert recent.get("req-4") == ServedAnswer("support-bot", "prod", Arm.CANARY, "shipping", None)
