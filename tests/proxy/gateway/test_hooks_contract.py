"""The client path's hooks, as an observer hears them: the order of the three hooks, the
abandoned attempt before a fallback, and an observer that raises failing alone."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from proxy.gateway.exchange import ProxyHandler
from proxy.gateway.hooks import ExchangeObserver, FinishedExchange
from proxy.gateway.routing import RoutePlan
from proxy.upstream import CallContext
from tests.conftest import InProcessGateway, wait_until
from tests.proxy.gateway.test_exchange_openai import MESSAGES


class Recording(ExchangeObserver):
    def __init__(self) -> None:
        self.heard: list[tuple[Any, ...]] = []

    def wait_closed(self, count: int = 1) -> list[tuple[Any, ...]]:
        """What was heard once `count` requests are closed (the answer reaches the client
        before the attempt's record is announced)."""
        wait_until(lambda: sum(h[0] == "closed" for h in self.heard) >= count, what="closed")
        return self.heard

    def request_planned(self, ctx: CallContext, plan: RoutePlan) -> None:
        self.heard.append(("planned", ctx.request_id, plan.target))

    def exchange_finished(self, done: FinishedExchange) -> None:
        record = done.record
        self.heard.append(("finished", record.request_id, record.target, done.final, done.text))

    def request_closed(self, ctx: CallContext) -> None:
        self.heard.append(("closed", ctx.request_id))


class Raising(ExchangeObserver):
    def exchange_finished(self, done: FinishedExchange) -> None:
        raise RuntimeError("observer bug")


class OnlyClosed(ExchangeObserver):
    """Overrides one hook: the others are the base class's no-ops."""

    def __init__(self) -> None:
        self.closed = 0

    def request_closed(self, ctx: CallContext) -> None:
        self.closed += 1


def observed(gw: InProcessGateway, observers: list[ExchangeObserver]) -> None:
    """Serve the proxied endpoints through a handler built with `observers` (and the gateway's
    own parts), as the app's wiring builds its handler."""
    parts = gw.gateway.proxy
    gw.gateway.proxy = ProxyHandler(
        parts.config, parts.routes, parts.caller, parts.metrics, parts.tracer,
        sinks=parts.sinks, observers=observers, rule_tracker=parts.rule_tracker,
    )  # fmt: skip


def test_each_request_is_planned_finished_and_closed_in_that_order(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway()
    recording, only_closed = Recording(), OnlyClosed()
    observed(gw, [recording, only_closed])
    response = gw.http.post("/v1/chat/completions", json={"model": "echo", "messages": MESSAGES})
    request_id = response.headers["x-mirrorgate-request-id"]
    answer = response.json()["choices"][0]["message"]["content"]
    assert recording.wait_closed() == [
        ("planned", request_id, "echo"),
        ("finished", request_id, "echo", True, answer),
        ("closed", request_id),
    ]
    wait_until(lambda: only_closed.closed == 1, what="the one-hook observer")
    # A request refused before it is planned is heard by nobody.
    assert gw.http.post("/v1/chat/completions", json={"model": "nope"}).status_code == 404
    assert len(recording.heard) == 3 and only_closed.closed == 1


def test_an_attempt_abandoned_for_the_fallback_comes_first_and_not_final(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway(extra={"routes": {"guarded": {"primary": "broken", "fallback": "echo"}}})
    recording = Recording()
    observed(gw, [recording])
    response = gw.http.post("/v1/chat/completions", json={"model": "guarded", "messages": MESSAGES})
    assert response.headers["x-mirrorgate-arm"] == "fallback"
    request_id = response.headers["x-mirrorgate-request-id"]
    heard = recording.wait_closed()
    kinds = [(h[0], h[2], h[3]) if h[0] == "finished" else h[0] for h in heard]
    assert kinds == ["planned", ("finished", "broken", False), ("finished", "echo", True), "closed"]
    assert {h[1] for h in heard} == {request_id}


def test_an_observer_that_raises_is_logged_and_counted_and_fails_alone(
    start_gateway: Callable[..., InProcessGateway], caplog: pytest.LogCaptureFixture
) -> None:
    gw = start_gateway()
    after = Recording()
    observed(gw, [Raising(), after])
    with caplog.at_level(logging.ERROR):
        response = gw.http.post(
            "/v1/chat/completions", json={"model": "echo", "messages": MESSAGES}
        )
    assert response.status_code == 200 and response.json()["choices"]
    assert [h[0] for h in after.wait_closed()] == ["planned", "finished", "closed"]
    assert "Raising failed in exchange_finished" in caplog.text
    registry = gw.gateway.registry
    assert registry.get_sample_value("mirrorgate_internal_errors_total", {"component": "hook"}) == 1
