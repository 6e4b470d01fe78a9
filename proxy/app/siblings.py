"""The merged `/metrics` of one worker of `serve --workers`.

Each worker serves its app on two sockets: its share of the public port, and a private one on
127.0.0.1 (an ephemeral port the parent bound before forking, known to every worker). A scrape
on the public port is answered by whichever worker the kernel gave it to: it fetches its
siblings' expositions from their private sockets (at most `FETCH_TIMEOUT_S`, all at once) and
merges them with its own (`proxy.observability.merging`). A scrape on a private socket is
answered with that worker's own exposition, unmerged: that is what the siblings fetch. The
private socket answers nothing else (`guarded`: 404), so it is no second door to the gateway
beside the public port that network policies and probes know.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client import CollectorRegistry, generate_latest
from starlette.requests import Request

from proxy.observability import merge_worker_expositions

ASGIApp = Callable[[MutableMapping[str, Any], Any, Any], Awaitable[None]]

_NOT_HERE = b"this port only answers GET /metrics"

FETCH_TIMEOUT_S = 0.5
"""How long a scrape waits for a sibling's exposition; a late one counts as not answering."""
MAX_EXPOSITION_BYTES = 64 * 1024 * 1024
"""A sibling's answer larger than this counts as not answering."""


@dataclass(frozen=True, slots=True)
class WorkerSiblings:
    """Where this worker and its siblings answer privately."""

    index: int
    """This worker's number."""
    ports: tuple[int, ...]
    """The private loopback port of each worker, by number."""

    def guarded(self, app: ASGIApp) -> ASGIApp:
        """`app`, but for requests on this worker's private socket other than `GET /metrics`,
        which get 404."""
        private_port = self.ports[self.index]

        async def serve(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
            server = scope.get("server")
            if (
                scope["type"] == "http"
                and server is not None
                and server[1] == private_port
                and (scope["method"], scope["path"]) != ("GET", "/metrics")
            ):
                headers = [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(_NOT_HERE)).encode()),
                ]
                await send({"type": "http.response.start", "status": 404, "headers": headers})
                await send({"type": "http.response.body", "body": _NOT_HERE})
                return
            await app(scope, receive, send)

        return serve

    async def exposition(self, request: Request, registry: CollectorRegistry) -> bytes:
        """`GET /metrics`: merged on the public port, this worker's own on its private one."""
        own = generate_latest(registry)
        server = request.scope.get("server")
        if server is not None and server[1] == self.ports[self.index]:
            return own
        async with httpx.AsyncClient(timeout=FETCH_TIMEOUT_S, trust_env=False) as client:
            fetched = await asyncio.gather(
                *(self._fetch(client, port) for i, port in enumerate(self.ports) if i != self.index)
            )
        others = iter(fetched)
        parts = {
            str(i): own.decode() if i == self.index else next(others)
            for i in range(len(self.ports))
        }
        # Parsing and rewriting every sibling's text is pure Python (~11 ms of CPU for four
        # workers of a small gateway, more with every route's histograms): on a thread, so the
        # client requests this worker serves meanwhile wait at most a GIL switch, not the merge.
        return await asyncio.to_thread(merge_worker_expositions, parts)

    @staticmethod
    async def _fetch(client: httpx.AsyncClient, port: int) -> str | None:
        try:
            async with asyncio.timeout(FETCH_TIMEOUT_S):
                answer = await client.get(f"http://127.0.0.1:{port}/metrics")
        except (httpx.HTTPError, TimeoutError):
            return None
        if answer.status_code != 200 or len(answer.content) > MAX_EXPOSITION_BYTES:
            return None
        return answer.text
