"""A tiny HTTP/1.1 server on 127.0.0.1:0 that records requests and answers scripted statuses."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx

from tests.alerts.alert_factory import make_alert
from tests.conftest import TLS_CONTEXT


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class RecordingServer:
    """Answers each request with the next of `statuses` (then 200), recording it first."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.statuses = list(statuses or [])
        self.requests: list[RecordedRequest] = []
        self._server: asyncio.Server | None = None
        self._changed = asyncio.Condition()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    async def __aenter__(self) -> RecordingServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):  # keep-alive connections would hold wait_closed
            writer.close()
        await self._server.wait_closed()

    async def wait_for(self, count: int, timeout_s: float = 10.0) -> None:
        """Wait until `count` requests were recorded (a condition with a deadline, not a sleep)."""
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(lambda: len(self.requests) >= count), timeout_s
            )

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        name, value = line.split(":", 1)
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                status = self.statuses.pop(0) if self.statuses else 200
                async with self._changed:
                    self.requests.append(RecordedRequest(method, path, headers, body))
                    self._changed.notify_all()
                payload = b'{"status":"ok"}' if status < 300 else b'{"error":"scripted"}'
                writer.write(
                    f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(payload)}\r\n\r\n".encode()
                    + payload
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()


@contextmanager
def refused_url() -> Iterator[str]:
    """A URL on 127.0.0.1 whose port is bound but not listening: connecting is refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


async def send_one(sink_factory: Any, statuses: list[int] | None = None) -> RecordedRequest:
    """Send one alert through the sink `sink_factory(server_url)` makes; return what the server
    got (it answers `statuses` in turn, 200 by default)."""
    async with RecordingServer(statuses) as server, httpx.AsyncClient(verify=TLS_CONTEXT) as client:
        sink = sink_factory(server.url)
        await sink.send(make_alert(), client)
        assert len(server.requests) == 1
        return server.requests[0]
