"""A worker's `/metrics` fetching its siblings over loopback: a sibling that never answers or
answers garbage is down in the merged answer, which still parses; on its private port a worker
answers its own exposition, unmerged."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families
from starlette.requests import Request

from proxy.app.siblings import WorkerSiblings


def request_on(port: int) -> Request:
    return Request({"type": "http", "method": "GET", "path": "/metrics", "headers": [],
                    "server": ("127.0.0.1", port)})  # fmt: skip


@pytest.fixture
def silent() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    sock = socket.create_server(("127.0.0.1", 0))
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture
def garbage() -> Iterator[int]:
    """A port that answers every connection with a 200 that is not an exposition."""
    sock = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(65536)
                body = b"{{{ not metrics\n"
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield sock.getsockname()[1]
    stop.set()
    thread.join()
    sock.close()


def test_silent_and_garbage_siblings_are_down_and_the_answer_parses(
    silent: int, garbage: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sibling that never answers is down whatever the timeout: 50 ms proves what the real
    # 0.5 s does, without the fast suite waiting it out.
    monkeypatch.setattr("proxy.app.siblings.FETCH_TIMEOUT_S", 0.05)
    registry = CollectorRegistry()
    Counter("mirrorgate_requests", "Requests.", registry=registry).inc(2)
    own = socket.create_server(("127.0.0.1", 0))
    try:
        siblings = WorkerSiblings(0, (own.getsockname()[1], silent, garbage))
        body = asyncio.run(siblings.exposition(request_on(8080), registry))
    finally:
        own.close()
    found = {
        (s.name, s.labels.get("worker")): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
        if not s.name.endswith("_created")
    }
    assert found == {
        ("mirrorgate_requests_total", "0"): 2,
        ("mirrorgate_worker_up", "0"): 1,
        ("mirrorgate_worker_up", "1"): 0,
        ("mirrorgate_worker_up", "2"): 0,
    }


def test_on_its_private_port_a_worker_answers_its_own_exposition() -> None:
    registry = CollectorRegistry()
    Counter("mirrorgate_requests", "Requests.", registry=registry).inc()
    siblings = WorkerSiblings(1, (9, 4242))
    body = asyncio.run(siblings.exposition(request_on(4242), registry)).decode()
    assert "mirrorgate_requests_total 1.0" in body and "worker" not in body


@pytest.mark.parametrize(
    ("port", "method", "path", "reaches_the_app"),
    [
        (7001, "GET", "/metrics", True),  # what the siblings fetch
        (7001, "GET", "/admin/rollouts", False),
        (7001, "POST", "/v1/chat/completions", False),
        (7001, "POST", "/metrics", False),
        (8080, "POST", "/admin/reload", True),  # the public port: the whole gateway
    ],
)
def test_the_private_socket_answers_only_the_metrics(
    port: int, method: str, path: str, reaches_the_app: bool
) -> None:
    called: list[str] = []
    sent: list[dict[str, object]] = []

    async def app(scope: object, receive: object, send: object) -> None:
        called.append(path)

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    guarded = WorkerSiblings(1, (7000, 7001)).guarded(app)
    scope = {"type": "http", "method": method, "path": path, "server": ("127.0.0.1", port)}
    asyncio.run(guarded(scope, None, send))
    assert called == ([path] if reaches_the_app else [])
    if not reaches_the_app:
        assert sent[0]["status"] == 404 and b"only answers GET /metrics" in sent[1]["body"]  # type: ignore[operator]
