"""POST /v1/outcomes and GET /admin/operations/{id} through a gateway (in process): outcomes join
their operation (also before the recorder wrote it), are idempotent per kind, counted once, and
the operation's cost — client calls, fallbacks and judge calls, not shadows — is what the
summary and the histogram say; bad, huge, hostile and unauthenticated posts change nothing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from proxy.core import OutcomeRecord
from proxy.mock_upstream.server import MockUpstreamServer
from proxy.store import OutcomeStore
from tests.conftest import InProcessGateway, wait_until
from tests.proxy.mirror.test_llm_judge import judged

StartGateway = Callable[..., InProcessGateway]
OP = "x-mirrorgate-operation"
APP_TOKEN = "app-token-for-outcomes-0123456789"
ADMIN_TOKEN = "admin-token-for-outcomes"
ADMIN = {"authorization": f"Bearer {ADMIN_TOKEN}"}
SECURED = {
    "MIRRORGATE_FEEDBACK_TOKENS": APP_TOKEN,
    "MIRRORGATE_FEEDBACK_SIGNING_KEY": "s" * 40,
    "MIRRORGATE_ADMIN_TOKEN": ADMIN_TOKEN,
}
APP = {"authorization": f"Bearer {APP_TOKEN}"}


def ask(gw: InProcessGateway, operation: str, model: str = "echo") -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": uuid.uuid4().hex}]}
    response = gw.http.post("/v1/chat/completions", json=body, headers={OP: operation})
    assert response.status_code == 200, response.text
    return response


def post(gw: InProcessGateway, body: Any, **headers: str) -> httpx.Response:
    return gw.http.post("/v1/outcomes", json=body, headers=headers)


def sample(gw: InProcessGateway, name: str, **labels: str) -> float:
    return gw.gateway.registry.get_sample_value(name, labels) or 0.0


def stored(gw: InProcessGateway, operation: str) -> list[OutcomeRecord]:
    return OutcomeStore(gw.gateway.store).outcomes(operation)


def test_outcomes_join_their_operation_once_per_kind_and_are_counted_once(
    start_gateway: StartGateway,
) -> None:
    gw = start_gateway()
    first = ask(gw, "ticket-1")
    ask(gw, "ticket-1")
    # Posted at once: the exchanges may still be in the recorder's queue.
    body = {"operation_id": "ticket-1", "completed": True, "adopted": False, "value": 12.5,
            "labels": {"channel": "chat"}}  # fmt: skip
    answer = post(gw, body)
    assert answer.status_code == 201, answer.text
    assert answer.json() == {"operation_id": "ticket-1", "duplicates": [],
                             "recorded": ["completed", "adopted", "value", "labels"]}  # fmt: skip
    again = post(gw, {"operation_id": "ticket-1", "completed": False, "corrected": True})
    assert again.status_code == 201
    assert (again.json()["recorded"], again.json()["duplicates"]) == (["corrected"], ["completed"])
    kinds = {o.kind: o for o in stored(gw, "ticket-1")}
    assert kinds["completed"].flag is True  # the repeat changed nothing
    assert kinds["value"].value == 12.5 and kinds["labels"].labels == (("channel", "chat"),)
    assert kinds["completed"].route == "echo" and kinds["completed"].caller.startswith("addr:")
    labels = {"route": "echo", "arm": "primary"}
    assert sample(gw, "mirrorgate_operations_total", **labels, outcome="completed") == 1
    assert sample(gw, "mirrorgate_operations_total", **labels, outcome="not_completed") == 0
    assert sample(gw, "mirrorgate_operations_total", **labels, outcome="not_adopted") == 1
    assert sample(gw, "mirrorgate_operations_total", **labels, outcome="corrected") == 1
    # The cost of both calls, observed once, when `completed` first arrived.
    records = wait_until(
        lambda: len(r := gw.gateway.store.query(route="echo")) == 2 and r, what="both stored"
    )
    cost = sum(r.cost_usd for r in records)
    assert cost > 0
    assert sample(gw, "mirrorgate_operation_cost_usd_count", **labels) == 1
    assert sample(gw, "mirrorgate_operation_cost_usd_sum", **labels) == pytest.approx(cost)
    assert first.headers["x-mirrorgate-request-id"] in {r.request_id for r in records}


def test_the_summary_counts_fallbacks_and_judge_calls_and_keeps_shadows_apart(
    start_gateway: StartGateway, upstream: MockUpstreamServer
) -> None:
    extra = judged(upstream)
    extra["routes"]["saved"] = {"primary": "broken", "fallback": "echo"}  # type: ignore[index]
    gw = start_gateway(extra=extra, env={"MIRRORGATE_ADMIN_TOKEN": ADMIN_TOKEN})
    ask(gw, "ticket 2/a", model="shadowed")
    ask(gw, "ticket 2/a", model="saved")
    store = gw.gateway.store
    records = wait_until(
        lambda: len(r := [x for x in store.query(limit=1000) if x.operation_id]) == 6 and r,
        what="primary, shadow, two judge calls, failed primary, fallback",
    )
    answer = gw.http.get("/admin/operations/ticket%202%2Fa", headers=ADMIN)
    assert answer.status_code == 200, answer.text
    summary = answer.json()
    assert (summary["requests"], summary["calls"], summary["fallbacks"]) == (2, 3, 1)
    assert summary["judge_calls"] == 2 and summary["off_path"]["shadow_calls"] == 1
    client = sum(r.cost_usd for r in records if r.arm.value in ("primary", "fallback"))
    judge = sum(r.cost_usd for r in records if r.arm.value == "judge")
    shadow = sum(r.cost_usd for r in records if r.arm.value == "shadow")
    assert judge > 0 and shadow > 0
    assert summary["cost_usd"] == pytest.approx(client + judge)
    assert summary["off_path"]["shadow_cost_usd"] == pytest.approx(shadow)
    assert summary["routes"] == ["shadowed", "saved"] and summary["arm"] == "primary"
    assert summary["arms"] == ["primary", "fallback"]
    assert summary["latency_s"] > 0 and summary["outcomes"] == {}
    assert gw.http.get("/admin/operations/nobody", headers=ADMIN).status_code == 404
    assert gw.http.get("/admin/operations/ticket%202%2Fa").status_code == 401
    bad = gw.http.get("/admin/operations/" + "x" * 200, headers=ADMIN)
    assert bad.status_code == 400 and "at most 128" in bad.json()["error"]["message"]


def test_an_outcome_joins_from_the_store_once_the_recent_index_forgot(
    start_gateway: StartGateway,
) -> None:
    gw = start_gateway()
    ask(gw, "old-ticket")
    wait_until(lambda: gw.gateway.store.count(route="echo") == 1, what="stored")
    gw.gateway.recent_operations._calls.clear()  # as after a restart
    answer = post(gw, {"operation_id": "old-ticket", "completed": True})
    assert answer.status_code == 201 and answer.json()["recorded"] == ["completed"]


@pytest.mark.parametrize(
    ("content", "status", "message"),
    [
        (b'{"operation_id": "nope", "completed": true}', 404, "no exchange of operation"),
        (b'{"operation_id": "t"}', 400, "give at least one of"),
        (b'{"operation_id": "t", "completed": "yes"}', 400, "completed"),
        (b'{"operation_id": "t", "completed": 1}', 400, "completed"),
        (b'{"operation_id": 7, "completed": true}', 400, "operation_id"),
        (b'{"operation_id": "", "completed": true}', 400, "operation_id"),
        (b'{"operation_id": "t\\u0000x", "completed": true}', 400, "printable ASCII"),
        (b'{"operation_id": "' + b"x" * 129 + b'", "completed": true}', 400, "at most 128"),
        (b'{"operation_id": "t", "completed": true, "arm": "x"}', 400, "arm"),
        (b'{"operation_id": "t", "value": "12"}', 400, "value"),
        (b'{"operation_id": "t", "value": 1e999}', 400, "infinity"),
        (b'{"operation_id": "t", "labels": {}}', 400, "labels"),
        (b'{"operation_id": "t", "labels": {"a": 1}}', 400, "labels"),
        (b'{"operation_id": "t", "labels": {"": "x"}}', 400, "label names"),
        (b'{"operation_id": "t", "labels": {"a": "' + b"y" * 300 + b'"}}', 400, "longer"),
        (
            b'{"operation_id": "t", "labels": {'
            + b",".join(b'"k%d": "v"' % i for i in range(21))
            + b"}}",
            400,
            "labels",
        ),
        (b'{"operation_id": ', 400, "not valid JSON"),
        (b'["operation_id"]', 400, "malformed"),
        (b'{"operation_id": "t", "labels": {"a": "' + b"y" * 100_000 + b'"}}', 413, "larger"),
    ],
)
def test_bad_outcomes_are_refused_and_change_nothing(
    start_gateway: StartGateway, content: bytes, status: int, message: str
) -> None:
    gw = start_gateway()
    ask(gw, "t")
    response = gw.http.post(
        "/v1/outcomes", content=content, headers={"content-type": "application/json"}
    )
    assert response.status_code == status, response.text
    assert message in response.json()["error"]["message"]
    assert OutcomeStore(gw.gateway.store).query() == []
    assert sample(gw, "mirrorgate_operations_total", route="echo", arm="primary",
                  outcome="completed") == 0  # fmt: skip


def test_outcomes_need_json(start_gateway: StartGateway) -> None:
    gw = start_gateway()
    assert gw.http.post("/v1/outcomes", content=b"completed=1").status_code == 415


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_concurrent_posts_of_one_kind_store_one_and_count_one(
    start_gateway: StartGateway, request: pytest.FixtureRequest, backend: str
) -> None:
    db_url = request.getfixturevalue("pg_migrated_schema")[0] if backend == "postgres" else None
    gw = start_gateway(db_url=db_url)
    ask(gw, "raced")

    async def race() -> list[httpx.Response]:
        async with gw.async_client() as client:
            body = {"operation_id": "raced", "completed": True}
            return list(await asyncio.gather(
                *(client.post("/v1/outcomes", json=body) for _ in range(12))
            ))  # fmt: skip

    answers = asyncio.run(race())
    assert {a.status_code for a in answers} == {201}
    assert sum(a.json()["recorded"] == ["completed"] for a in answers) == 1
    assert len(stored(gw, "raced")) == 1
    labels = {"route": "echo", "arm": "primary"}
    assert sample(gw, "mirrorgate_operations_total", **labels, outcome="completed") == 1
    assert sample(gw, "mirrorgate_operation_cost_usd_count", **labels) == 1


def test_without_a_token_an_outcome_is_401_and_an_app_token_or_a_signed_one_posts(
    start_gateway: StartGateway,
) -> None:
    gw = start_gateway(env=SECURED)
    answers = [ask(gw, "secured"), ask(gw, "secured")]
    tokens = [a.headers["x-mirrorgate-feedback-token"] for a in answers]
    other_token = ask(gw, "someone-else").headers["x-mirrorgate-feedback-token"]
    body = {"operation_id": "secured", "completed": True}
    assert post(gw, body).status_code == 401
    assert post(gw, body, authorization="Bearer wrong").status_code == 401
    # Another operation's answer token is worth nothing for this one.
    refused = post(gw, body, **{"x-mirrorgate-feedback-token": other_token})
    assert refused.status_code == 401 and "operation" in refused.json()["error"]["message"]
    assert sample(gw, "mirrorgate_outcomes_rejected_total", reason="unauthenticated") == 1
    assert sample(gw, "mirrorgate_outcomes_rejected_total", reason="bad_token") == 2
    assert stored(gw, "secured") == []
    # The token of any answer of the operation will do (here: the first of its two requests).
    signed = post(gw, body, **{"x-mirrorgate-feedback-token": tokens[0]})
    assert signed.status_code == 201 and signed.json()["recorded"] == ["completed"]
    by_app = post(gw, {"operation_id": "secured", "adopted": True, "user": "u-1"}, **APP)
    assert by_app.status_code == 201
    callers = {o.kind: o.caller for o in stored(gw, "secured")}
    assert callers["completed"].startswith("addr:")
    assert callers["adopted"].startswith("app:") and "/user:" in callers["adopted"]
    # A signed token for an operation nobody knows proves nothing: 401, not 404.
    unknown = post(gw, {"operation_id": "nobody", "completed": True},
                   **{"x-mirrorgate-feedback-token": tokens[0]})  # fmt: skip
    assert unknown.status_code == 401
    missing = post(gw, {"operation_id": "nobody", "completed": True}, **APP)
    assert missing.status_code == 404


def test_a_caller_beyond_its_rate_is_429_before_its_body_is_read(
    start_gateway: StartGateway,
) -> None:
    gw = start_gateway(extra={"server": {"outcome_rate_per_s": 0.001, "outcome_burst": 2}})
    ask(gw, "busy")
    body = {"operation_id": "busy", "completed": True}
    assert [post(gw, body).status_code for _ in range(2)] == [201, 201]
    limited = post(gw, body)
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) > 0
    assert sample(gw, "mirrorgate_outcomes_rejected_total", reason="rate_limited") == 1


def test_an_application_posting_every_operations_outcome_is_not_held_to_feedbacks_rate(
    start_gateway: StartGateway,
) -> None:
    """Feedback's buckets (a correction now and then) would refuse an application that reports
    every operation; outcomes have their own, and a full burst of them under feedback's tight
    limits is stored."""
    feedback_burst = 2
    gw = start_gateway(
        extra={"server": {"feedback_rate_per_s": 0.001, "feedback_burst": feedback_burst}}
    )
    # Ten times what feedback's bucket lets through (a refill each 1,000 s): feedback's limits
    # would refuse all but the first two; outcomes' own bucket (outcome_burst 2000) lets all in.
    posted = 10 * feedback_burst
    for i in range(posted):
        ask(gw, f"op-{i}")
    answers = [post(gw, {"operation_id": f"op-{i}", "completed": True}) for i in range(posted)]
    assert [a.status_code for a in answers] == [201] * posted
    assert sample(gw, "mirrorgate_outcomes_rejected_total", reason="rate_limited") == 0


def test_while_the_store_is_down_an_outcome_is_503_and_stored_when_sent_again(
    start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    from proxy.store import StoreUnavailableError

    gw = start_gateway()
    ask(gw, "outage")
    outcomes = gw.gateway.outcomes.outcomes
    real_add = outcomes.add

    def down(record: OutcomeRecord) -> bool:
        raise StoreUnavailableError("database is locked")

    monkeypatch.setattr(outcomes, "add", down)
    body = {"operation_id": "outage", "completed": True}
    answer = post(gw, body)
    assert answer.status_code == 503 and "send the outcome again" in answer.text
    assert sample(gw, "mirrorgate_operations_total", route="echo", arm="primary",
                  outcome="completed") == 0  # fmt: skip
    monkeypatch.setattr(outcomes, "add", real_add)
    assert post(gw, body).status_code == 201
    assert len(stored(gw, "outage")) == 1


def test_a_value_must_be_finite_however_it_was_parsed() -> None:
    from pydantic import ValidationError

    from proxy.api.outcomes import OutcomeBody

    with pytest.raises(ValidationError, match="finite"):
        OutcomeBody.model_validate({"operation_id": "t", "value": float("nan")})
    assert OutcomeBody.model_validate({"operation_id": "t", "value": 3}).value == 3.0
