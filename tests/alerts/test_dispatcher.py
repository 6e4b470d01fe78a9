"""The dispatcher: retries, failures, isolation of a down sink, dedupe and a full queue.

Sleeps between retries go through a recording fake, so nothing here waits on the wall clock; tests
wait on conditions (`stop` draining the queues, or the server having seen N requests)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from alerts.alert import Alert
from alerts.dispatcher import AlertDispatcher
from alerts.sink import AlertSink
from alerts.slack import SlackSink
from alerts.webhook import WebhookSink
from proxy.observability.metrics import AlertDeliveryMetrics
from tests.alerts.alert_factory import make_alert
from tests.alerts.recording_server import RecordingServer, refused_url
from tests.conftest import TLS_CONTEXT


class FakeSleep:
    """Records requested pauses and yields once, instead of waiting."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await asyncio.sleep(0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def dispatcher(
    sinks: list[AlertSink],
    client: httpx.AsyncClient,
    registry: CollectorRegistry,
    sleep: Callable[[float], Awaitable[Any]] | None = None,
    **kwargs: Any,
) -> AlertDispatcher:
    return AlertDispatcher(
        sinks, client, AlertDeliveryMetrics(registry), sleep=sleep or FakeSleep(), **kwargs
    )


def alert_n(n: int) -> Alert:
    return make_alert(check=f"check-{n}")


def test_retries_5xx_with_backoff_then_succeeds() -> None:
    registry, sleep = CollectorRegistry(), FakeSleep()

    async def run() -> RecordingServer:
        async with (
            RecordingServer([500, 503]) as server,
            httpx.AsyncClient(verify=TLS_CONTEXT) as client,
        ):
            d = dispatcher([WebhookSink(server.url)], client, registry, sleep)
            d.start()
            assert d.notify(make_alert())
            assert await d.stop(timeout_s=10) == 0
            return server

    server = asyncio.run(run())
    assert len(server.requests) == 3
    assert server.requests[0].body == server.requests[2].body
    assert len(sleep.delays) == 2
    assert 0.25 <= sleep.delays[0] <= 0.5 and 0.5 <= sleep.delays[1] <= 1.0
    assert (
        value(registry, "mirrorgate_alerts_sent_total", sink="webhook", kind="rule_regression") == 1
    )
    assert value(registry, "mirrorgate_alert_failures_total", sink="webhook") == 0


def test_4xx_is_not_retried_and_counts_a_failure() -> None:
    registry, sleep = CollectorRegistry(), FakeSleep()

    async def run() -> RecordingServer:
        async with (
            RecordingServer([400]) as server,
            httpx.AsyncClient(verify=TLS_CONTEXT) as client,
        ):
            d = dispatcher([WebhookSink(server.url)], client, registry, sleep)
            d.start()
            d.notify(make_alert())
            await d.stop(timeout_s=10)
            return server

    server = asyncio.run(run())
    assert len(server.requests) == 1
    assert sleep.delays == []
    assert value(registry, "mirrorgate_alert_failures_total", sink="webhook") == 1
    assert (
        value(registry, "mirrorgate_alerts_sent_total", sink="webhook", kind="rule_regression") == 0
    )


def test_down_sink_retries_then_fails_while_the_other_sink_delivers() -> None:
    registry, sleep = CollectorRegistry(), FakeSleep()

    async def run(down_url: str) -> RecordingServer:
        async with RecordingServer() as server, httpx.AsyncClient(verify=TLS_CONTEXT) as client:
            sinks: list[AlertSink] = [WebhookSink(down_url), SlackSink(server.url)]
            d = dispatcher(sinks, client, registry, sleep, retries=3)
            d.start()
            d.notify(make_alert())
            assert await d.stop(timeout_s=10) == 0
            return server

    with refused_url() as down:
        server = asyncio.run(run(down))
    assert len(server.requests) == 1
    assert len(sleep.delays) == 3  # three retries after the first attempt
    assert value(registry, "mirrorgate_alert_failures_total", sink="webhook") == 1
    assert (
        value(registry, "mirrorgate_alerts_sent_total", sink="slack", kind="rule_regression") == 1
    )


def test_a_stuck_sink_never_blocks_the_other_sink_or_the_caller() -> None:
    registry = CollectorRegistry()
    never = asyncio.Event()

    async def stuck_sleep(delay: float) -> None:
        await never.wait()  # the down sink's backoff never ends during this test

    async def run(down_url: str) -> tuple[RecordingServer, int]:
        async with RecordingServer() as server, httpx.AsyncClient(verify=TLS_CONTEXT) as client:
            sinks: list[AlertSink] = [WebhookSink(down_url), SlackSink(server.url)]
            d = dispatcher(sinks, client, registry, stuck_sleep)
            d.start()
            assert all(d.notify(alert_n(i)) for i in range(3))
            await server.wait_for(3)
            return server, await d.stop(timeout_s=0)

    with refused_url() as down:
        server, abandoned = asyncio.run(run(down))
    assert len(server.requests) == 3
    assert abandoned == 3  # the stuck sink's three alerts, one of them mid-retry
    assert (
        value(registry, "mirrorgate_alerts_sent_total", sink="slack", kind="rule_regression") == 3
    )


def test_same_fingerprint_within_the_window_is_deduplicated() -> None:
    registry, clock = CollectorRegistry(), FakeClock()

    async def run() -> RecordingServer:
        async with RecordingServer() as server, httpx.AsyncClient(verify=TLS_CONTEXT) as client:
            d = dispatcher(
                [WebhookSink(server.url)], client, registry, clock=clock, dedupe_window_s=300
            )
            d.start()
            assert d.notify(make_alert())
            clock.now += 299
            assert not d.notify(make_alert(summary="same condition, fresher numbers"))
            assert d.notify(make_alert(check="another-check"))
            clock.now += 2  # the first alert's window has passed
            assert d.notify(make_alert())
            await d.stop(timeout_s=10)
            return server

    server = asyncio.run(run())
    assert [r.json()["check"] for r in server.requests] == [
        "max-weight",
        "another-check",
        "max-weight",
    ]
    assert value(registry, "mirrorgate_alerts_dropped_total", reason="deduplicated") == 1


def test_a_new_rollout_of_the_same_route_and_kind_is_not_deduplicated() -> None:
    registry, clock = CollectorRegistry(), FakeClock()

    async def run() -> RecordingServer:
        async with RecordingServer() as server, httpx.AsyncClient(verify=TLS_CONTEXT) as client:
            d = dispatcher(
                [WebhookSink(server.url)], client, registry, clock=clock, dedupe_window_s=300
            )
            d.start()
            assert d.notify(make_alert(kind="rollback", rollout_id="first"))
            clock.now += 30
            assert d.notify(make_alert(kind="rollback", rollout_id="second"))
            assert not d.notify(make_alert(kind="rollback", rollout_id="second", summary="again"))
            await d.stop(timeout_s=10)
            return server

    server = asyncio.run(run())
    assert [r.json()["rollout_id"] for r in server.requests] == ["first", "second"]
    assert value(registry, "mirrorgate_alerts_dropped_total", reason="deduplicated") == 1


def test_full_queue_drops_and_counts_without_blocking() -> None:
    registry = CollectorRegistry()

    async def run() -> list[bool]:
        async with httpx.AsyncClient(verify=TLS_CONTEXT) as client:
            d = dispatcher([WebhookSink("http://127.0.0.1:9")], client, registry, queue_size=2)
            return [d.notify(alert_n(i)) for i in range(4)]  # not started: nothing drains

    assert asyncio.run(run()) == [True, True, False, False]
    assert value(registry, "mirrorgate_alerts_dropped_total", reason="queue_full") == 2


class ExplodingSink:
    name = "exploding"

    async def send(self, alert: Alert, client: httpx.AsyncClient) -> None:
        raise RuntimeError("plugin bug")


def test_a_sink_that_raises_fails_alone_and_its_worker_survives() -> None:
    registry = CollectorRegistry()

    async def run() -> RecordingServer:
        async with RecordingServer() as server, httpx.AsyncClient(verify=TLS_CONTEXT) as client:
            d = dispatcher([ExplodingSink(), WebhookSink(server.url)], client, registry)
            d.start()
            d.notify(alert_n(1))
            d.notify(alert_n(2))
            assert await d.stop(timeout_s=10) == 0
            return server

    server = asyncio.run(run())
    assert len(server.requests) == 2
    assert value(registry, "mirrorgate_alert_failures_total", sink="exploding") == 2


def test_backoff_is_exponential_capped_and_jittered() -> None:
    async def make(jitter: float) -> AlertDispatcher:
        async with httpx.AsyncClient(verify=TLS_CONTEXT) as client:
            return AlertDispatcher(
                [],
                client,
                AlertDeliveryMetrics(CollectorRegistry()),
                jitter=lambda: jitter,
                backoff_initial_s=0.5,
                backoff_max_s=30,
            )

    low, high = asyncio.run(make(0.0)), asyncio.run(make(0.999999))
    assert [low.backoff_s(n) for n in range(8)] == [0.25, 0.5, 1, 2, 4, 8, 15, 15]
    assert [round(high.backoff_s(n), 3) for n in range(8)] == [0.5, 1, 2, 4, 8, 16, 30, 30]


@pytest.mark.parametrize("bad", [{"retries": -1}, {"queue_size": 0}, {"dedupe_window_s": -1}])
def test_invalid_settings_are_rejected(bad: dict[str, int]) -> None:
    async def run() -> None:
        async with httpx.AsyncClient(verify=TLS_CONTEXT) as client:
            metrics = AlertDeliveryMetrics(CollectorRegistry())
            AlertDispatcher([], client, metrics, **bad)  # type: ignore[arg-type]

    with pytest.raises(ValueError):
        asyncio.run(run())
