"""Experiments through a gateway (in process): the admin API (and what it refuses), sticky
serving of the arms with their prompt variants in every wire format, the refusal of an
experiment beside a rollout (both ways), restart, and a guardrail stopping an arm."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from analyzers.experiments import Unit
from proxy.core import ExchangeRecord
from tests.conftest import InProcessGateway, wait_until
from tests.webhook_receiver import WebhookReceiver

TOKEN = "t0ken-for-tests"
AUTH = {"authorization": f"Bearer {TOKEN}"}
AUTH_JSON = {**AUTH, "content-type": "application/json"}
ENV = {"MIRRORGATE_ADMIN_TOKEN": TOKEN}
APPEND = "Answer in one sentence."

pytestmark = pytest.mark.usefixtures("quick_rollout_ticks")


def experiment_extra(
    *,
    unit: str = "header:x-user-id",
    arms: dict[str, Any] | None = None,
    weights: dict[str, int] | None = None,
    guardrails: list[str] | None = None,
    canary: bool = False,
    sinks: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    experiment: dict[str, Any] = {
        "arms": arms
        or {
            "control": {"model": "echo"},
            "cheaper": {"model": "rule-follower"},
            "terse": {"model": "echo", "system_prompt_append": APPEND},
        },
        "unit": unit,
        "primary_metric": "completion_rate",
        "guardrails": guardrails or ["error_rate"],
        "minimum_detectable_effect": 0.05,
        "interval_s": 3600,
        "min_units": 30,
    }
    if weights is not None:
        experiment["weights"] = weights
    route: dict[str, Any] = {"primary": "echo", "fallback": "echo", "experiment": experiment}
    claude = {
        "primary": "echo-claude",
        "experiment": {
            "arms": {
                "control": {"model": "echo-claude"},
                "terse": {"model": "echo-claude", "system_prompt_append": APPEND},
            },
            "weights": {"control": 1, "terse": 99},
            "unit": "header:x-user-id",
            "minimum_detectable_effect": 0.05,
        },
    }
    if canary:
        route["canary"] = {"model": "rule-follower", "steps": [50], "sticky": "header:x-user-id"}
    extra: dict[str, Any] = {"routes": {"bot": route, "claude-bot": claude}}
    if sinks is not None:
        extra["alerts"] = {"sinks": sinks, "retries": 0}
    return extra


def start(start_gateway: Any, **kwargs: Any) -> InProcessGateway:
    db = kwargs.pop("db_url", None)
    return start_gateway(db_url=db, extra=experiment_extra(**kwargs), env=ENV)


def ask(gw: InProcessGateway, user: str | None, *, route: str = "bot", **extra: Any) -> Any:
    headers = {"x-user-id": user} if user is not None else {}
    body = {"model": route, "messages": [{"role": "user", "content": f"hi {user}"}], **extra}
    return gw.http.post("/v1/chat/completions", json=body, headers=headers)


def post(gw: InProcessGateway, path: str, body: Any = None, **kwargs: Any) -> Any:
    content = json.dumps({} if body is None else body)
    return gw.http.post(path, content=content, headers=kwargs.pop("headers", AUTH_JSON))


def records(gw: InProcessGateway, request_id: str) -> list[ExchangeRecord]:
    wait_until(lambda: gw.gateway.store.query(request_id=request_id), what="its record")
    return list(gw.gateway.store.query(request_id=request_id))


def test_started_experiment_serves_each_user_one_arm_sticky(start_gateway: Any) -> None:
    gw = start(start_gateway)
    before = ask(gw, "u1")
    assert before.headers["x-mirrorgate-arm"] == "primary"
    assert "x-mirrorgate-experiment-arm" not in before.headers

    started = post(gw, "/admin/experiments/bot/start", {"reason": "which is better"})
    assert started.status_code == 200, started.text
    body = started.json()
    assert body["changed"] is True
    assert body["experiment"]["state"] == "running"
    assert body["serving"]["running"] is True
    seen: dict[str, str] = {}
    for round_ in range(2):
        for n in range(60):
            answer = ask(gw, f"user-{n}")
            assert answer.status_code == 200
            assert answer.headers["x-mirrorgate-arm"] == "experiment"
            arm = answer.headers["x-mirrorgate-experiment-arm"]
            if round_ == 0:
                seen[f"user-{n}"] = arm
            else:
                assert seen[f"user-{n}"] == arm  # sticky
    assert set(seen.values()) == {"control", "cheaper", "terse"}
    # No unit key: served as if no experiment ran, and not counted.
    anonymous = ask(gw, None)
    assert anonymous.headers["x-mirrorgate-arm"] == "primary"
    assert "x-mirrorgate-experiment-arm" not in anonymous.headers

    again = post(gw, "/admin/experiments/bot/start", {})
    assert again.status_code == 200 and again.json()["changed"] is False
    assert again.json()["experiment"]["id"] == body["experiment"]["id"]

    stopped = post(gw, "/admin/experiments/bot/stop", {"reason": "done"})
    assert stopped.status_code == 200 and stopped.json()["changed"] is True
    assert stopped.json()["experiment"]["state"] == "stopped"
    after = ask(gw, "user-1")
    assert after.headers["x-mirrorgate-arm"] == "primary"
    assert post(gw, "/admin/experiments/bot/stop", {}).json()["changed"] is False
    status = gw.http.get("/admin/experiments/bot", headers=AUTH).json()
    assert [e["kind"] for e in status["events"]] == ["stopped", "started"]


def test_records_carry_the_arm_and_a_hashed_unit(start_gateway: Any) -> None:
    gw = start(start_gateway)
    assert post(gw, "/admin/experiments/bot/start").status_code == 200
    answer = ask(gw, "alice@example.com")
    (record,) = records(gw, answer.headers["x-mirrorgate-request-id"])
    assert record.arm == "experiment"
    assert record.experiment_arm == answer.headers["x-mirrorgate-experiment-arm"]
    assert record.experiment_unit is not None and len(record.experiment_unit) == 24
    assert "alice" not in record.experiment_unit
    metrics = gw.http.get("/metrics").text
    assert 'mirrorgate_experiment_running{route="bot"} 1.0' in metrics
    assert 'mirrorgate_requests_total{arm="experiment"' in metrics


def _arm_of(gw: InProcessGateway, wanted: str, route: str = "bot") -> str:
    """A user the route's running experiment assigns to arm `wanted` (asked of its plan)."""
    for n in range(400):
        plan = gw.gateway.routes.plan(route, [(b"x-user-id", f"user-{n}".encode())], {})
        if plan is not None and plan.experiment_arm == wanted:
            return f"user-{n}"
    raise AssertionError(f"no user landed in {wanted}")


def test_prompt_variant_reaches_the_model_in_every_wire_format(start_gateway: Any) -> None:
    gw = start(start_gateway)
    assert post(gw, "/admin/experiments/bot/start").status_code == 200
    assert post(gw, "/admin/experiments/claude-bot/start").status_code == 200
    user = _arm_of(gw, "terse")
    control = _arm_of(gw, "control")

    def sent(answer: Any) -> dict[str, Any]:
        assert answer.status_code == 200, answer.text
        (record,) = records(gw, answer.headers["x-mirrorgate-request-id"])
        assert record.request_body is not None
        loaded: dict[str, Any] = json.loads(record.request_body)
        return loaded

    chat = sent(
        gw.http.post(
            "/v1/chat/completions",
            json={
                "model": "bot",
                "messages": [
                    {"role": "system", "content": "Be kind."},
                    {"role": "user", "content": "hi"},
                ],
            },
            headers={"x-user-id": user},
        )
    )
    assert chat["messages"][0] == {"role": "system", "content": f"Be kind.\n\n{APPEND}"}
    bare = sent(ask(gw, user))
    assert bare["messages"][0] == {"role": "system", "content": APPEND}
    untouched = sent(ask(gw, control))
    assert untouched["messages"] == [{"role": "user", "content": f"hi {control}"}]
    responses = sent(
        gw.http.post(
            "/v1/responses",
            json={"model": "bot", "input": "hi", "instructions": "Be kind."},
            headers={"x-user-id": user},
        )
    )
    assert responses["instructions"] == f"Be kind.\n\n{APPEND}"
    claude_user = _arm_of(gw, "terse", "claude-bot")
    claude = sent(
        gw.http.post(
            "/v1/messages",
            json={
                "model": "claude-bot",
                "max_tokens": 10,
                "system": [{"type": "text", "text": "Be kind."}],
                "messages": [{"role": "user", "content": "hi"}],
            },
            headers={"x-user-id": claude_user},
        )
    )
    assert claude["system"] == [
        {"type": "text", "text": "Be kind."},
        {"type": "text", "text": APPEND},
    ]


def test_an_experiment_and_a_rollout_refuse_each_other(start_gateway: Any) -> None:
    gw = start(start_gateway, canary=True)
    assert post(gw, "/admin/rollouts/bot/start").status_code == 200
    refused = post(gw, "/admin/experiments/bot/start")
    assert refused.status_code == 409
    assert "rollout of canary rule-follower" in refused.json()["error"]["message"]
    assert post(gw, "/admin/rollouts/bot/abort").status_code == 200
    assert post(gw, "/admin/experiments/bot/start").status_code == 200
    blocked = post(gw, "/admin/rollouts/bot/start")
    assert blocked.status_code == 409
    assert "experiment" in blocked.json()["error"]["message"]
    assert (
        gw.gateway.rollouts.state("bot").phase is None
        or not gw.gateway.rollouts.state("bot").active
    )


def test_admin_api_refuses_the_tokenless_and_the_malformed(start_gateway: Any) -> None:
    gw = start(start_gateway)
    assert gw.http.get("/admin/experiments/bot").status_code == 401
    no_token = gw.http.post(
        "/admin/experiments/bot/start", content="{}", headers={"content-type": "application/json"}
    )
    assert no_token.status_code == 401
    wrong = {"authorization": "Bearer nope", "content-type": "application/json"}
    assert post(gw, "/admin/experiments/bot/start", headers=wrong).status_code == 403
    assert gw.gateway.experiments.running("bot") is None  # nothing moved
    assert post(gw, "/admin/experiments/nope/start").status_code == 404
    assert post(gw, "/admin/experiments/bot/explode").status_code == 404
    assert post(gw, "/admin/experiments/echo/start").status_code == 409  # none configured
    hostile: list[Any] = [
        [],
        {"reason": 5},
        {"reason": "x" * 1001},
        {"reason": "ok", "weights": {"control": 100}},
    ]
    for body in hostile:
        assert post(gw, "/admin/experiments/bot/start", body).status_code == 400, body
    for raw in ("", "{", "\x00\xff"):
        answer = gw.http.post("/admin/experiments/bot/start", content=raw, headers=AUTH_JSON)
        assert answer.status_code == 400, raw
    huge = gw.http.post(
        "/admin/experiments/bot/start",
        content=json.dumps({"reason": "x" * 20_000}),
        headers=AUTH_JSON,
    )
    assert huge.status_code == 413
    long_route = gw.http.get("/admin/experiments/" + "r" * 5000, headers=AUTH)
    assert long_route.status_code in (404, 414)
    assert gw.gateway.experiments.running("bot") is None


def test_a_restart_keeps_the_experiment_and_every_unit_in_its_arm(
    start_gateway: Any, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'kept.db'}"
    gw = start(start_gateway, db_url=db)
    assert post(gw, "/admin/experiments/bot/start").status_code == 200
    arms = {f"u{n}": ask(gw, f"u{n}").headers["x-mirrorgate-experiment-arm"] for n in range(30)}
    experiment_id = gw.gateway.experiments.running("bot")
    gw.stop()
    again = start(start_gateway, db_url=db)
    running = again.gateway.experiments.running("bot")
    assert running is not None and experiment_id is not None
    assert running.experiment_id == experiment_id.experiment_id
    for user, arm in arms.items():
        assert ask(again, user).headers["x-mirrorgate-experiment-arm"] == arm


def test_a_guardrail_breach_stops_the_arm_and_alerts(start_gateway: Any) -> None:
    receiver = WebhookReceiver()
    try:
        gw = start(
            start_gateway,
            arms={"control": {"model": "echo"}, "flaky": {"model": "broken"}},
            weights={"control": 50, "flaky": 50},
            sinks=[{"type": "webhook", "url": receiver.url}],
        )
        assert post(gw, "/admin/experiments/bot/start").status_code == 200
        flaky_users = []
        for n in range(160):
            answer = ask(gw, f"g{n}")
            assert answer.status_code == 200  # the fallback answers for the broken arm
            if answer.headers["x-mirrorgate-experiment-arm"] == "flaky":
                flaky_users.append(f"g{n}")
        wait_until(
            lambda: len(
                {r.experiment_unit for r in gw.gateway.store.query(route="bot") if r.experiment_arm}
            )
            >= 150,
            what="the experiment's records",
        )
        decider = gw.gateway.controller.experiments
        assert decider is not None
        asyncio.run_coroutine_threadsafe(decider.tick(force=True), gw.loop).result(30)
        state = gw.gateway.experiments.running("bot")
        assert state is not None and state.stopped_arms == {"flaky"}
        # Its units are now served by control.
        assert ask(gw, flaky_users[0]).headers["x-mirrorgate-experiment-arm"] == "control"
        metrics = gw.http.get("/metrics").text
        assert (
            'mirrorgate_experiment_arm_stopped_total{arm="flaky",metric="error_rate",route="bot"}'
            " 1.0"
        ) in metrics
        assert 'mirrorgate_experiment_weight_percent{arm="flaky",route="bot"} 0.0' in metrics
        alert = wait_until(
            lambda: next(
                (a for a in receiver.bodies if a.get("kind") == "experiment_arm_stopped"), None
            ),
            what="the alert",
        )
        assert "flaky" in alert["summary"] and "error_rate" in alert["summary"]
        status = gw.http.get("/admin/experiments/bot", headers=AUTH).json()
        assert status["decision"]["arms"][0]["verdict"] == "stopped"
        assert "arm_stopped" in [e["kind"] for e in status["events"]]
        # The next look counts the stopped arm's units with control's, whose buckets serve
        # them now: the split still follows the weights (not "units on an arm weighted 0").
        asyncio.run_coroutine_threadsafe(decider.tick(force=True), gw.loop).result(30)
        srm = decider.decisions["bot"].srm
        assert srm is not None and not srm.flagged and srm.counts["flaky"] == 0
        status = gw.http.get("/admin/experiments/bot", headers=AUTH).json()
        assert "srm_flagged" not in [e["kind"] for e in status["events"]]
    finally:
        receiver.close()


def test_units_feed_the_statistics_as_they_expect() -> None:
    from proxy.rollout.experiment_decider import as_units
    from proxy.store import UnitTally

    counts: dict[str, Any] = {"operations": 2, "requests": 3, "errors": 1, "cost_usd": 0.5}
    tally = UnitTally(arm="a", completed=1, outcomes=1, **counts)
    (unit,) = as_units([tally])["a"]
    assert unit == Unit(arm="a", completed=1, outcomes=1, **counts)


def test_weights_follow_the_config_and_srm_stays_quiet(start_gateway: Any) -> None:
    gw = start(
        start_gateway,
        arms={"control": {"model": "echo"}, "b": {"model": "echo"}},
        weights={"control": 80, "b": 20},
    )
    assert post(gw, "/admin/experiments/bot/start").status_code == 200
    counts = Counter(ask(gw, f"w{n}").headers["x-mirrorgate-experiment-arm"] for n in range(400))
    assert 260 <= counts["control"] <= 380  # 320 expected
    wait_until(
        lambda: len([r for r in gw.gateway.store.query(route="bot") if r.experiment_arm]) >= 400,
        what="the records",
    )
    decider = gw.gateway.controller.experiments
    assert decider is not None
    asyncio.run_coroutine_threadsafe(decider.tick(force=True), gw.loop).result(30)
    decision = decider.decisions["bot"]
    assert decision.srm is not None and not decision.srm.flagged
    assert 'mirrorgate_experiment_srm{route="bot"} 0.0' in gw.http.get("/metrics").text


def test_an_operations_outcome_counts_under_its_experiment_arm(start_gateway: Any) -> None:
    gw = start(start_gateway, unit="operation")
    assert post(gw, "/admin/experiments/bot/start").status_code == 200
    body = {"model": "bot", "messages": [{"role": "user", "content": "hi"}]}
    answer = gw.http.post(
        "/v1/chat/completions", json=body, headers={"x-mirrorgate-operation": "ticket-7"}
    )
    arm = answer.headers["x-mirrorgate-experiment-arm"]
    records(gw, answer.headers["x-mirrorgate-request-id"])
    posted = gw.http.post("/v1/outcomes", json={"operation_id": "ticket-7", "completed": True})
    assert posted.status_code == 201, posted.text
    metrics = gw.http.get("/metrics").text
    assert (
        f'mirrorgate_operations_total{{arm="{arm}",outcome="completed",route="bot"}} 1.0' in metrics
    )
