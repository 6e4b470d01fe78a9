"""Every exchange gets a record, however it ends: against a real `mirrorgate serve` (uvloop and
httptools, as deployed) in front of a real mock upstream, with raw sockets where the connection's
shape is the point.

Each scenario counts the upstream calls on the mock's side and compares them with the records:
a pipelining client that hangs up, a hang-up while a non-stream waits on its upstream (the call
is cancelled: the mock sees its client go), a hang-up mid-stream, the upstream's total deadline,
SIGTERM with streams longer than the drain time (each client gets the provider's error event,
each stream a `shutdown` record, the process exits 0 by itself) and SIGHUP (drains the same way:
every answered request is recorded).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy.core import ExchangeRecord, Status
from proxy.mock_upstream.behavior import parse_behavior
from proxy.mock_upstream.server import MockUpstreamServer
from proxy.store import Store
from tests.conftest import wait_until
from tests.e2e.conftest import GatewayProcess

pytestmark = pytest.mark.e2e

MOCK_BEHAVIOR: dict[str, Any] = {
    "record_requests": False,
    "default": {"answer": {"type": "echo", "answer_tokens": 20}},
    "models": {
        "never": {"latency_ms": 600_000},
        "long": {
            "ttft_ms": 5,
            "tokens_per_second": 40,
            "stream_chunk_tokens": 1,
            "answer": {"type": "echo", "answer_tokens": 100_000},
        },
    },
}
MESSAGES = [{"role": "user", "content": "tell me a long story"}]
PRICE = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}


@pytest.fixture(scope="module")
def mock() -> Iterator[MockUpstreamServer]:
    with MockUpstreamServer(parse_behavior(MOCK_BEHAVIOR)) as server:
        yield server


def gateway_config(mock_url: str, db_url: str, drain_timeout_s: float = 10) -> dict[str, Any]:
    """Routes named like the mock's models; `deadline` waits on `never` with a 0.3 s total
    deadline (and a per-read timeout of a minute, which alone would never fire)."""

    def model(name: str, provider: str = "openai", **extra: Any) -> dict[str, Any]:
        base = mock_url + "/v1" if provider == "openai" else mock_url
        return {"provider": provider, "base_url": base, "model": name, "price": PRICE, **extra}

    models = {
        "quick": model("quick"),
        "never": model("never"),
        "pipelined": model("never"),
        "long": model("long"),
        "long-claude": model("long", "anthropic"),
        "deadline": model("never", timeout_s=60, total_timeout_s=0.3),
    }
    return {
        "server": {"drain_timeout_s": drain_timeout_s},
        "store": {"url": db_url, "bodies": "none", "flush_interval_ms": 10},
        "models": models,
        "routes": {name: {"primary": name} for name in models},
    }


class Gateways:
    """Starts `mirrorgate serve` processes (each stopped by PID at the end) and opens their
    stores for reading."""

    def __init__(self, folder: Path, mock: MockUpstreamServer) -> None:
        self.folder = folder
        self.mock = mock
        self.started: list[tuple[GatewayProcess, Store]] = []

    def start(self, **options: Any) -> tuple[GatewayProcess, Store]:
        db_url = f"sqlite:///{self.folder / f'gw-{len(self.started)}.db'}"
        gateway = GatewayProcess(gateway_config(self.mock.url, db_url, **options), self.folder)
        store = Store(db_url)
        self.started.append((gateway, store))
        return gateway, store

    def stop(self) -> None:
        for gateway, store in self.started:
            gateway.terminate()
            store.close()


@pytest.fixture(scope="module")
def shared(
    tmp_path_factory: pytest.TempPathFactory, mock: MockUpstreamServer
) -> Iterator[tuple[GatewayProcess, Store]]:
    """One gateway for the hang-up scenarios (each uses routes of its own)."""
    gateways = Gateways(tmp_path_factory.mktemp("ends"), mock)
    yield gateways.start()
    gateways.stop()


@pytest.fixture
def fresh(tmp_path: Path, mock: MockUpstreamServer) -> Iterator[Gateways]:
    """Gateways of this test alone (the signal scenarios stop theirs)."""
    gateways = Gateways(tmp_path, mock)
    yield gateways
    gateways.stop()


@pytest.fixture(autouse=True)
def _reset_mock(mock: MockUpstreamServer) -> None:
    """Each scenario counts the upstream calls it made from zero."""
    httpx.post(mock.url + "/_mock/reset")


def mock_stats(mock: MockUpstreamServer) -> dict[str, Any]:
    return httpx.get(mock.url + "/_mock/stats").json()  # type: ignore[no-any-return]


def records(store: Store, route: str, count: int) -> list[ExchangeRecord]:
    """The route's records, once there are `count` of them (failing after a deadline)."""
    found: list[ExchangeRecord] = []

    def enough() -> bool:
        found[:] = store.query(route=route)
        return len(found) >= count

    wait_until(enough, timeout_s=15, what=f"{count} records of route {route}")
    return found


def raw_request(route: str, stream: bool = False) -> bytes:
    body = orjson.dumps({"model": route, "messages": MESSAGES, "stream": stream})
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def connect(gateway: GatewayProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", gateway.port), timeout=10)


def assert_no_traceback(gateway: GatewayProcess) -> None:
    log = gateway.output()
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log


# --- clients that hang up -----------------------------------------------------------------------


def test_a_pipelining_client_that_hangs_up_leaves_a_record_per_upstream_call(
    shared: tuple[GatewayProcess, Store], mock: MockUpstreamServer
) -> None:
    gateway, store = shared
    connections = [connect(gateway) for _ in range(10)]
    for sock in connections:  # three pipelined requests each; only the first is being served
        sock.sendall(raw_request("pipelined") * 3)
    wait_until(lambda: mock_stats(mock)["total"] >= 10, what="10 upstream calls")
    for sock in connections:
        sock.close()
    # Requests that arrived without answering — quick answers written into closed sockets.
    for _ in range(10):
        with connect(gateway) as sock:
            sock.sendall(raw_request("quick") * 3)
    wait_until(lambda: mock_stats(mock)["abandoned"] == 10, what="10 cancelled upstream calls")
    delayed = records(store, "pipelined", 10)
    assert [r.status for r in delayed] == [Status.CLIENT_DISCONNECTED] * 10
    # The upstream billed the prompt: the record says what it cost.
    assert all(r.usage.input_tokens > 0 and r.cost_usd > 0 for r in delayed)
    calls = mock_stats(mock)["total"]
    assert calls >= 20
    quick = records(store, "quick", calls - 10)
    assert len(delayed) + len(quick) == calls  # one record per upstream call, no more
    assert_no_traceback(gateway)


def test_a_hang_up_while_a_non_stream_waits_cancels_the_upstream_call_and_is_recorded(
    shared: tuple[GatewayProcess, Store], mock: MockUpstreamServer
) -> None:
    gateway, store = shared
    with connect(gateway) as sock:
        sock.sendall(raw_request("never"))
        wait_until(lambda: mock_stats(mock)["total"] == 1, what="the upstream call")
    # The gateway noticed: the upstream connection closed long before the answer was due.
    wait_until(lambda: mock_stats(mock)["abandoned"] == 1, what="the upstream call cancelled")
    (record,) = records(store, "never", 1)
    assert record.status is Status.CLIENT_DISCONNECTED and record.http_status == 0
    assert record.usage.input_tokens > 0 and record.cost_usd > 0
    metrics = httpx.get(gateway.url + "/metrics").text
    assert 'mirrorgate_exchanges_cut_total{reason="client_disconnected",route="never"} 1.0' in (
        metrics
    )
    assert_no_traceback(gateway)


def test_a_hang_up_mid_stream_is_recorded_with_what_was_streamed(
    shared: tuple[GatewayProcess, Store],
) -> None:
    gateway, store = shared
    with connect(gateway) as sock:
        sock.sendall(raw_request("long", stream=True))
        received = b""
        while received.count(b"data: ") < 5:
            received += sock.recv(65536)
    (record,) = records(store, "long", 1)
    assert record.status is Status.CLIENT_DISCONNECTED and record.http_status == 200
    assert record.usage.output_tokens >= 4 and record.cost_usd > 0
    assert_no_traceback(gateway)


def test_a_non_stream_over_its_total_deadline_is_a_504_and_a_timeout_record(
    shared: tuple[GatewayProcess, Store], mock: MockUpstreamServer
) -> None:
    gateway, store = shared
    body = {"model": "deadline", "messages": MESSAGES}
    response = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 504
    error = response.json()["error"]
    assert error["type"] == "timeout" and "within 0.3s" in error["message"]
    (record,) = records(store, "deadline", 1)
    assert record.status is Status.TIMEOUT and record.error_class == "UpstreamTotalTimeout"
    wait_until(lambda: mock_stats(mock)["abandoned"] == 1, what="the upstream call cancelled")


# --- stopping with exchanges in flight ----------------------------------------------------------


class StreamReader:
    """A streaming client in a thread: the whole body it received, once the server ended it."""

    def __init__(self, url: str, path: str, body: dict[str, Any]) -> None:
        self.first_event = threading.Event()
        self.body = b""
        self.status = 0
        self._args = (url + path, body)

    def __call__(self) -> StreamReader:
        url, body = self._args
        headers = {"anthropic-version": "2023-06-01"} if "messages" in url else {}
        with httpx.stream("POST", url, json=body, headers=headers, timeout=60) as response:
            self.status = response.status_code
            for chunk in response.iter_raw():
                self.body += chunk
                if b"data: " in self.body:
                    self.first_event.set()
        return self


def stop_with_streams_in_flight(
    gateway: GatewayProcess, sig: signal.Signals, during: Callable[[], None] = lambda: None
) -> tuple[list[StreamReader], int, dict[str, Any] | None]:
    """Open four long OpenAI streams, one Anthropic stream and one non-stream that never gets
    its answer, then send `sig`; return the stream readers, the process's exit code and the
    non-stream's answer."""
    chat = {"messages": MESSAGES, "stream": True, "max_tokens": 100_000}
    readers = [
        StreamReader(gateway.url, "/v1/chat/completions", {**chat, "model": "long"})
        for _ in range(4)
    ]
    readers.append(StreamReader(gateway.url, "/v1/messages", {**chat, "model": "long-claude"}))
    answer: list[httpx.Response] = []

    def never() -> None:
        body = {"model": "never", "messages": MESSAGES}
        answer.append(httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=60))

    with ThreadPoolExecutor(len(readers) + 1) as pool:
        futures = [pool.submit(reader) for reader in readers]
        waiting = pool.submit(never)
        for reader in readers:
            assert reader.first_event.wait(15), "the stream did not start"
        during()
        gateway.proc.send_signal(sig)
        try:
            code = gateway.proc.wait(30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the gateway did not exit by itself:\n{gateway.output()}")
        for future in futures:
            future.result(15)
        waiting.result(15)
    return readers, code, answer[0].json() if answer else None


def assert_cut_and_recorded(
    gateway: GatewayProcess,
    store: Store,
    readers: list[StreamReader],
    answer: dict[str, Any] | None,
) -> None:
    """Every stream's client got the provider's error event, the non-stream's a 503, and each
    of the six has a `shutdown` record with what the upstream billed."""
    for reader in readers[:4]:  # OpenAI: an error chunk, and the stream ends
        assert reader.status == 200
        assert b'data: {"error":{"message":"the gateway is shutting down' in reader.body
        assert reader.body.endswith(b"\n\n")
    claude = readers[4]
    assert b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error"' in claude.body
    assert answer is not None and "shutting down" in answer["error"]["message"]
    cut = store.query(route="long") + store.query(route="long-claude") + store.query(route="never")
    assert [r.status for r in cut] == [Status.SHUTDOWN] * 6
    assert all(r.usage.input_tokens > 0 and r.cost_usd > 0 for r in cut)
    assert sorted(r.http_status for r in cut) == [200] * 5 + [503]
    assert "6 exchange(s) still running after 0.5s were cut" in gateway.output()
    assert_no_traceback(gateway)


def test_sigterm_cuts_streams_longer_than_the_drain_with_an_error_event_and_a_record(
    fresh: Gateways,
) -> None:
    gateway, store = fresh.start(drain_timeout_s=0.5)
    readers, code, answer = stop_with_streams_in_flight(gateway, signal.SIGTERM)
    assert code == 0, gateway.output()
    assert_cut_and_recorded(gateway, store, readers, answer)


def test_sighup_reloads_under_load_and_sigterm_then_drains_recording_every_answer(
    fresh: Gateways,
) -> None:
    """SIGHUP reloads the configuration (it no longer stops the gateway): under steady traffic
    and with long streams open, no request fails across it; SIGTERM then drains as always."""
    gateway, store = fresh.start(drain_timeout_s=0.5)
    answered: list[str] = []
    failed: list[str] = []
    stop, terminating = threading.Event(), threading.Event()

    def hammer() -> None:  # keep-alive requests until the gateway is gone
        with httpx.Client(base_url=gateway.url, timeout=10) as client:
            while not stop.is_set():
                try:
                    response = client.post(
                        "/v1/chat/completions", json={"model": "quick", "messages": MESSAGES}
                    )
                except httpx.HTTPError as exc:
                    if not terminating.is_set():
                        failed.append(repr(exc))
                    return
                if response.status_code == 200:
                    answered.append(response.headers["x-mirrorgate-request-id"])
                elif not terminating.is_set():
                    failed.append(str(response.status_code))

    threads = [threading.Thread(target=hammer) for _ in range(4)]

    def reloaded() -> bool:
        metrics = httpx.get(gateway.url + "/metrics", timeout=5).text
        return 'mirrorgate_config_reloads_total{result="unchanged"} 1.0' in metrics

    def hammer_and_reload() -> None:
        for thread in threads:
            thread.start()
        wait_until(lambda: len(answered) >= 50, what="50 answered requests")
        gateway.proc.send_signal(signal.SIGHUP)
        wait_until(reloaded, what="the reload counted")
        before = len(answered)
        wait_until(lambda: len(answered) >= before + 50, what="50 more answers after the reload")
        assert gateway.proc.poll() is None, gateway.output()  # SIGHUP did not stop it
        terminating.set()

    try:
        readers, code, answer = stop_with_streams_in_flight(
            gateway, signal.SIGTERM, hammer_and_reload
        )
    finally:
        stop.set()
        for thread in threads:
            thread.join(15)
    assert failed == []
    assert code == 0, gateway.output()
    stored = {r.request_id for r in store.query(route="quick", limit=1_000_000)}
    assert len(answered) >= 100 and set(answered) <= stored
    assert_cut_and_recorded(gateway, store, readers, answer)
