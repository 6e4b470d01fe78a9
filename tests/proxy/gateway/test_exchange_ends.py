"""How an exchange that does not end by its answer is answered and recorded, in process: the
gateway cutting it (`ProxyHandler.cut`, what a shutdown does after its drain time) and the client
hanging up while the upstream is still silent. Over real sockets and signals: tests/hostile."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from proxy.core import ExchangeRecord, Status
from tests.conftest import InProcessGateway, wait_until

MESSAGES = [{"role": "user", "content": "are you there?"}]
# `stall` never answers; with a minute of read timeout only a cut or a hang-up ends the call.
SILENT = {
    "models": {
        "silent": {
            "provider": "openai", "base_url": "", "model": "stall", "timeout_s": 60,
            "price": {"input_per_mtok": 1.0, "output_per_mtok": 4.0},
        },
        "silent-claude": {
            "provider": "anthropic", "base_url": "", "model": "stall", "timeout_s": 60,
            "price": {"input_per_mtok": 3.0, "output_per_mtok": 15.0},
        },
    },
    "routes": {"silent": {"primary": "silent"}, "silent-claude": {"primary": "silent-claude"}},
}  # fmt: skip


def silent_gateway(start: Callable[..., InProcessGateway], upstream_url: str) -> InProcessGateway:
    extra: dict[str, Any] = {**SILENT, "models": {k: dict(v) for k, v in SILENT["models"].items()}}
    extra["models"]["silent"]["base_url"] = upstream_url + "/v1"
    extra["models"]["silent-claude"]["base_url"] = upstream_url
    return start(extra=extra)


def only_record(gw: InProcessGateway, route: str) -> ExchangeRecord:
    rows = wait_until(lambda: gw.gateway.store.query(route=route), what=f"the record of {route}")
    (record,) = rows
    return record  # type: ignore[no-any-return]


def cut_count(gw: InProcessGateway, route: str, reason: str) -> float | None:
    return gw.gateway.registry.get_sample_value(
        "mirrorgate_exchanges_cut_total", {"route": route, "reason": reason}
    )


@pytest.mark.parametrize(
    ("route", "path", "wire_error"),
    [
        ("silent", "/v1/chat/completions", lambda body: body["error"]["type"] == "server_error"),
        ("silent-claude", "/v1/messages", lambda body: body["error"]["type"] == "overloaded_error"),
    ],
)
def test_a_cut_non_stream_gets_a_503_in_its_wire_format_and_a_shutdown_record(
    start_gateway: Callable[..., InProcessGateway],
    upstream: Any,
    route: str,
    path: str,
    wire_error: Callable[[dict[str, Any]], bool],
) -> None:
    gw = silent_gateway(start_gateway, upstream.url)
    body = {"model": route, "messages": MESSAGES, "max_tokens": 10}
    headers = {"anthropic-version": "2023-06-01"}
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(gw.http.post, path, json=body, headers=headers, timeout=30)
        wait_until(lambda: gw.gateway.proxy.in_flight == 1, what="the call in flight")
        gw.loop.call_soon_threadsafe(gw.gateway.proxy.cut)
        response = answer.result(30)
    assert response.status_code == 503 and wire_error(response.json())
    assert "shutting down" in response.text
    record = only_record(gw, route)
    assert (record.status, record.error_class, record.http_status) == (
        Status.SHUTDOWN, "shutdown", 503,
    )  # fmt: skip
    assert record.usage.input_tokens > 0 and record.usage.estimated and record.cost_usd > 0
    assert cut_count(gw, route, "shutdown") == 1


def test_a_request_planned_after_the_cut_is_cut_at_once(
    start_gateway: Callable[..., InProcessGateway], upstream: Any
) -> None:
    gw = silent_gateway(start_gateway, upstream.url)
    gw.loop.call_soon_threadsafe(gw.gateway.proxy.cut)
    wait_until(lambda: gw.gateway.proxy.closing, what="the cut")
    response = gw.http.post("/v1/chat/completions", json={"model": "silent", "messages": MESSAGES})
    assert response.status_code == 503
    assert only_record(gw, "silent").status is Status.SHUTDOWN


def test_a_hang_up_while_the_upstream_is_silent_is_recorded_and_counted(
    start_gateway: Callable[..., InProcessGateway], upstream: Any
) -> None:
    gw = silent_gateway(start_gateway, upstream.url)
    body = {"model": "silent", "messages": MESSAGES}
    with pytest.raises(httpx.ReadTimeout):  # the client gives up: the driver hangs up
        gw.http.post("/v1/chat/completions", json=body, timeout=0.3)
    record = only_record(gw, "silent")
    assert (record.status, record.http_status) == (Status.CLIENT_DISCONNECTED, 0)
    assert record.usage.input_tokens > 0 and record.cost_usd > 0
    wait_until(lambda: gw.gateway.proxy.in_flight == 0, what="nothing in flight")
    assert cut_count(gw, "silent", "client_disconnected") == 1
