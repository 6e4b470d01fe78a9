"""Shadows are shed while the gateway's event loop is overloaded, and the client still gets its
answer: a real loop under real load, behind uvicorn on 127.0.0.1 (the monitor's arithmetic is
tested with injected readings in tests/proxy/mirror/test_overload.py)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

import httpx
import pytest

from proxy.app.serve import GatewayServer
from proxy.mock_upstream.server import MockUpstreamServer
from tests.conftest import wait_until
from tests.proxy.mirror.test_shadow import dropped, received, shadowed

pytestmark = pytest.mark.e2e


def ask(gw: GatewayServer, marker: str) -> httpx.Response:
    body = {
        "model": "shadowed",
        "messages": [
            {"role": "system", "content": "max_weight = 150"},
            {"role": "user", "content": f"{marker} how heavy?"},
        ],
    }
    response = httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=10)
    response.raise_for_status()
    return response


class LoopBlocker:
    """The load generator for overload tests: a callback on the gateway's event loop that
    blocks it for `block_s`, then lets it run for `gap_s`, again and again. `burn` spends the
    time on the CPU (a saturated loop); otherwise the thread sleeps (a loop starved of CPU by
    something else)."""

    def __init__(self, gw: GatewayServer, block_s: float, gap_s: float, burn: bool) -> None:
        self.loop = gw.server.servers[0].get_loop()
        self.block_s, self.gap_s, self.burn = block_s, gap_s, burn
        self.blocked_s = 0.0
        """Time the loop spent blocked so far, measured."""
        self._stop = threading.Event()

    def __enter__(self) -> LoopBlocker:
        self.loop.call_soon_threadsafe(self._block)
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()

    def _block(self) -> None:
        if self._stop.is_set():
            return
        start = time.perf_counter()
        if self.burn:
            while time.perf_counter() - start < self.block_s:
                pass
        else:
            time.sleep(self.block_s)
        self.blocked_s += time.perf_counter() - start
        self.loop.call_later(self.gap_s, self._block)


def overload_metrics(gw: GatewayServer, target: str) -> str:
    """The `reason="overload"` line of `target` in the gateway's /metrics exposition."""
    text = httpx.get(gw.url + "/metrics", timeout=10).text
    wanted = f'reason="overload",route="shadowed",target="{target}"'
    return next((line for line in text.splitlines() if wanted in line), "")


@pytest.mark.parametrize("load", ["saturated", "starved"])
def test_an_overloaded_loop_sheds_shadows_and_the_client_still_gets_its_answer(
    start_gateway_server: Callable[..., GatewayServer], upstream: MockUpstreamServer, load: str
) -> None:
    """`saturated`: the loop's own work keeps it on the CPU, with the default thresholds.
    `starved`: the loop's thread is off the CPU, so only the lag can tell (busy share left out)."""
    server = {} if load == "saturated" else {"shadow_shed_busy_percent": 0}
    extra = shadowed(upstream, [{"model": "cand-stale"}, {"model": "cand-follow"}])
    gw = start_gateway_server(extra={**extra, "server": server})
    shadows = gw.gateway.shadows
    assert shadows is not None and shadows.overload is not None
    monitor = shadows.overload
    marker = uuid.uuid4().hex
    # saturated: 30 ms of CPU out of every 35 ms. starved: asleep 50 ms out of every 52 ms.
    blocker = (
        LoopBlocker(gw, 0.030, 0.005, burn=True)
        if load == "saturated"
        else LoopBlocker(gw, 0.050, 0.002, burn=False)
    )
    with blocker:
        wait_until(lambda: monitor.overloaded, what="the loop to count as overloaded")
        assert blocker.blocked_s > 0.3
        if load == "starved":
            assert monitor.busy < 0.5 and monitor.lag_s >= 0.010
        for _ in range(4):
            response = ask(gw, marker)
            assert "You said" in response.text
            assert response.headers["x-mirrorgate-arm"] == "primary"
        assert monitor.overloaded
        registry = gw.gateway.registry
        assert registry.get_sample_value("mirrorgate_shadow_overloaded") == 1.0
        assert registry.get_sample_value("mirrorgate_event_loop_lag_seconds") > 0
    assert received(upstream, marker) == {"echo": 4}
    for target in ("cand-stale", "cand-follow"):
        assert dropped(gw, target, "overload") == 4
        assert overload_metrics(gw, target).endswith(" 4.0")
    if load == "saturated":
        # The load is gone: after the hold time the loop recovers and shadows run again.
        wait_until(lambda: not monitor.overloaded, what="the loop to recover")
        ask(gw, marker + "-after")
        wait_until(lambda: len(received(upstream, marker + "-after")) == 3, what="shadow calls")
        assert dropped(gw, "cand-stale", "overload") == 4
    gw.stop()
    assert not monitor.running  # the lifespan stopped the monitor's task
