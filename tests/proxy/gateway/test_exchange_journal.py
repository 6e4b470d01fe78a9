"""Where the crash journal is written: before the answer's last byte, streamed or not, and the
record the store gets is the one journaled (retimed), or the corrected one when the answer did
not reach the client.

The gateway is real, in front of the session's mock upstream; between it and the in-process
client sits a recorder of ASGI messages, and the journal's append is observed in the same log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.core import ExchangeRecord, Status, StoredRecord
from tests.conftest import InProcessGateway, MockUpstreamServer, gateway_config, wait_until

Log = list[tuple[Any, ...]]
HANG_UP = ("hang up after the journal",)
"""Put in the log: every send after the journal append fails, as to a client that is gone."""


@pytest.fixture
def observed_gateway(
    upstream: MockUpstreamServer, tmp_path: Path
) -> Iterator[Callable[[], tuple[InProcessGateway, Log]]]:
    started: list[InProcessGateway] = []

    def start() -> tuple[InProcessGateway, Log]:
        config = gateway_config(upstream.url, f"sqlite:///{tmp_path / 'gw.db'}")
        gw = InProcessGateway(config)
        log: Log = []
        proxy = gw.gateway.proxy
        journal = proxy.journal
        assert journal is not None  # on by default

        def observed_journal(record: StoredRecord) -> None:
            assert isinstance(record, ExchangeRecord)
            log.append(("journal", record))
            journal(record)

        proxy.journal = observed_journal
        app = gw.gateway.app

        async def observed_app(scope: Any, receive: Any, send: Any) -> None:
            async def logged(message: Any) -> None:
                journaled = any(event[0] == "journal" for event in log)
                if HANG_UP in log and journaled and message["type"].startswith("http.response"):
                    raise OSError("the client is gone")  # as uvicorn's send for a closed socket
                if message["type"] == "http.response.body":
                    log.append(("body", message.get("more_body", False)))
                await send(message)

            await app(scope, receive, logged if scope["type"] == "http" else send)

        gw.app_thread.app = observed_app  # before it starts: the lifespan goes through it too
        started.append(gw.start())
        return gw, log

    yield start
    for gw in started:
        gw.stop()


def last_body_index(log: Log) -> int:
    (index,) = [i for i, event in enumerate(log) if event == ("body", False)]
    return index


@pytest.mark.parametrize("stream", [False, True])
def test_the_record_is_journaled_before_the_last_byte_and_stored_as_journaled(
    stream: bool, observed_gateway: Callable[[], tuple[InProcessGateway, Log]]
) -> None:
    gw, log = observed_gateway()
    body = {"model": "echo", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    with gw.http.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        response.read()
        request_id = response.headers["x-mirrorgate-request-id"]
    (journaled,) = [event[1] for event in log if event[0] == "journal"]
    assert journaled.request_id == request_id and journaled.status is Status.OK
    assert log.index(("journal", journaled)) < last_body_index(log)

    store, journal = gw.gateway.store, gw.gateway.journal
    assert journal is not None
    wait_until(lambda: store.count(request_id=request_id) == 1, what="the record stored")
    (stored,) = store.query(request_id=request_id)
    assert stored.usage == journaled.usage and stored.cost_usd == journaled.cost_usd
    assert stored.duration_s >= journaled.duration_s  # retimed to the last byte
    wait_until(lambda: journal.waiting() == 0, what="the journal hearing the commit")


def test_an_answer_the_client_never_got_is_stored_corrected(
    observed_gateway: Callable[[], tuple[InProcessGateway, Log]],
) -> None:
    gw, log = observed_gateway()
    log.append(HANG_UP)
    body = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises((httpx.HTTPError, RuntimeError)):
        gw.http.post("/v1/chat/completions", json=body)
    (journaled,) = [event[1] for event in log if event[0] == "journal"]
    assert journaled.status is Status.OK  # what it was about to be
    store = gw.gateway.store
    wait_until(lambda: store.count() == 1, what="the record stored")
    (stored,) = store.query()
    assert stored.request_id == journaled.request_id
    assert (stored.status, stored.error_class) == (
        Status.CLIENT_DISCONNECTED,
        "client_disconnected",
    )
