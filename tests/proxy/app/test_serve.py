"""Serving under uvicorn: the server's settings, and a clean SIGTERM exiting 0 (the server itself
runs in tests/e2e)."""

from __future__ import annotations

import asyncio
import signal
import socket
import threading

import pytest
from prometheus_client import CollectorRegistry

from proxy.app.connection import LimitedHttpToolsProtocol
from proxy.app.gateway import Gateway
from proxy.app.serve import CUT_GRACE_S, ListenError, _DrainingServer, _uvicorn_config, listen
from tests.conftest import gateway_config, wait_until


def gateway(drain_timeout_s: float = 7) -> Gateway:
    extra = {"server": {"drain_timeout_s": drain_timeout_s}}
    config = gateway_config("http://127.0.0.1:9", "sqlite:///unused.db", extra)
    return Gateway(config, registry=CollectorRegistry(), env={})


def test_uvicorn_adds_no_headers_of_its_own_and_cancels_only_after_the_gateways_cut() -> None:
    config = _uvicorn_config(gateway(drain_timeout_s=7), "127.0.0.1", 8080)
    assert (config.host, config.port) == ("127.0.0.1", 8080)
    # Proxied answers carry the upstream's own date and server headers.
    assert config.server_header is False and config.date_header is False
    assert config.lifespan == "on" and config.access_log is False
    # The gateway drains its exchanges for drain_timeout_s and cuts the rest itself; uvicorn's
    # own deadline (it cancels, leaving no error event) only bounds what is left after the cut.
    assert config.timeout_graceful_shutdown == CUT_GRACE_S
    # The client connection's protocol: the limits, and pipelined hang-ups told to the request
    # being served.
    assert isinstance(config.http, type) and issubclass(config.http, LimitedHttpToolsProtocol)
    assert config.proxy_headers is False


def test_a_signal_that_drained_cleanly_is_not_re_raised() -> None:
    gw = gateway()
    server = _DrainingServer(_uvicorn_config(gw, "127.0.0.1", 0), gw)
    server.handle_exit(signal.SIGTERM, None)
    assert server.should_exit
    # uvicorn re-raises what it captured after shutting down: nothing is left to re-raise.
    assert server._captured_signals == []


def test_exit_soon_ends_the_main_loop_without_waiting_for_the_next_tick() -> None:
    gw = gateway()
    server = _DrainingServer(_uvicorn_config(gw, "127.0.0.1", 0), gw)
    server.config.load()
    server.tick_s = 3600.0  # no tick comes while the test runs: only the wake-up ends the wait

    serving = threading.Thread(target=asyncio.run, args=(server.main_loop(),), daemon=True)
    serving.start()
    wait_until(lambda: server._exit_asked is not None, what="the loop waiting for its next tick")
    server.exit_soon()  # from another thread than the loop's, as GatewayServer.stop
    serving.join(15)
    assert not serving.is_alive()
    assert server.should_exit


def test_sighup_reloads_and_keeps_serving() -> None:
    config = gateway().config
    gw = Gateway(config, registry=CollectorRegistry(), env={}, source=lambda: config)
    server = _DrainingServer(_uvicorn_config(gw, "127.0.0.1", 0), gw)
    reloads = gw.metrics.config_reloads.labels("unchanged")

    async def hang_up() -> None:
        server.handle_hangup(signal.SIGHUP, None)
        await asyncio.sleep(0)  # the handler's callback runs: it spawns the reload
        (task,) = [t for t in asyncio.all_tasks() if t.get_name() == "gateway:reload"]
        async with asyncio.timeout(10):
            await task

    asyncio.run(hang_up())
    assert not server.should_exit and server._captured_signals == []
    assert reloads._value.get() == 1


def test_sighup_without_a_file_keeps_serving() -> None:
    gw = gateway()
    server = _DrainingServer(_uvicorn_config(gw, "127.0.0.1", 0), gw)
    server.handle_hangup(signal.SIGHUP, None)  # no loop running: logged, ignored
    assert not server.should_exit


def test_an_address_that_cannot_be_listened_on_is_named_in_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ListenError) as info:
            listen("127.0.0.1", port)
    assert str(info.value) == f"port {port} on 127.0.0.1 is in use"
    with pytest.raises(ListenError, match=r"^cannot listen on 192\.0\.2\.1: not an address"):
        listen("192.0.2.1", 0)  # TEST-NET-1: never this machine's
    with pytest.raises(ListenError, match=r"^cannot listen on no-such-host\.invalid:0: unknown"):
        listen("no-such-host.invalid", 0)
    opened = listen("127.0.0.1", 0)
    with opened:
        assert opened.getsockname()[0] == "127.0.0.1" and opened.getsockname()[1] > 0


def test_uvicorn_logs_through_the_gateways_handler() -> None:
    config = _uvicorn_config(gateway(), "127.0.0.1", 0)
    assert config.log_config is None and config.access_log is False


@pytest.mark.parametrize(("value", "frozen"), [(None, True), ("1", True), ("", True), ("0", False)])
def test_serve_freezes_its_startup_objects_unless_the_environment_says_0(
    monkeypatch: pytest.MonkeyPatch, value: str | None, frozen: bool
) -> None:
    from analyzers.errors import PluginError
    from proxy.app import serve

    seen: list[bool] = []

    def built(config: object, **kwargs: object) -> Gateway:
        seen.append(bool(kwargs["freeze_gc"]))
        raise PluginError("stop here")  # the gateway's wiring is all this test needs

    if value is None:
        monkeypatch.delenv("MIRRORGATE_GC_FREEZE", raising=False)
    else:
        monkeypatch.setenv("MIRRORGATE_GC_FREEZE", value)
    monkeypatch.setattr(serve, "Gateway", built)
    config = gateway_config("http://127.0.0.1:9", "sqlite:///unused.db", {"server": {"port": 0}})
    assert serve.run_gateway(config) == 1
    assert seen == [frozen]


@pytest.mark.parametrize(("value", "seconds"), [(None, 0.001), ("2.5", 0.0025)])
def test_serve_sets_the_gil_switch_interval_before_it_builds_the_gateway(
    monkeypatch: pytest.MonkeyPatch, value: str | None, seconds: float
) -> None:
    import sys

    from analyzers.errors import PluginError
    from proxy.app import serve

    seen: list[float] = []

    def built(config: object, **kwargs: object) -> Gateway:
        seen.append(sys.getswitchinterval())
        raise PluginError("stop here")

    if value is None:
        monkeypatch.delenv("MIRRORGATE_SWITCH_INTERVAL_MS", raising=False)
    else:
        monkeypatch.setenv("MIRRORGATE_SWITCH_INTERVAL_MS", value)
    monkeypatch.setattr(serve, "Gateway", built)
    before = sys.getswitchinterval()
    config = gateway_config("http://127.0.0.1:9", "sqlite:///unused.db", {"server": {"port": 0}})
    try:
        assert serve.run_gateway(config) == 1
    finally:
        sys.setswitchinterval(before)
    assert seen == [pytest.approx(seconds)]
