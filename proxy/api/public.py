"""The public routes that are not proxied: the route list, health, readiness and metrics.

    GET /v1/models   the routes: OpenAI's list shape, Anthropic's when `anthropic-version` is sent
    GET /healthz     200 while the process serves
    GET /readyz      200 once the config is loaded, while the store answers and records can be
                     written; else 503 with the reason
    GET /metrics     the Prometheus exposition of the gateway's registry (of every worker, each
                     sample labelled `worker`, under `serve --workers`)

None of them needs a token: they say nothing a client of the gateway could not learn by calling it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from proxy.gateway import RouteTable
from proxy.store import redact


@dataclass(frozen=True, slots=True)
class PublicParts:
    """What the public routes reach of their gateway: `app.state.public_parts`, set by the app's
    wiring. `started`: whether the gateway finished starting (config loaded, store migrated);
    `store_ok`: a blocking ping of the store (run on a worker thread); `write_problem`: why
    records cannot be written now (the recorder's last write error, a deleted database file), or
    None; `exposition`: the answer of `GET /metrics` when it is not the registry's own (the
    merged exposition of `serve --workers`)."""

    routes: RouteTable
    registry: CollectorRegistry
    started: Callable[[], bool]
    store_ok: Callable[[], bool]
    write_problem: Callable[[], str | None] = lambda: None
    exposition: Callable[[Request], Awaitable[bytes]] | None = None


def public_parts(request: Request) -> PublicParts:
    """The public parts of the gateway serving `request`."""
    parts: PublicParts = request.app.state.public_parts
    return parts


# Built once per process: the endpoints reach their gateway through the request.
public_router = APIRouter()


@public_router.get("/v1/models")
async def models(request: Request) -> JSONResponse:
    names = public_parts(request).routes.names()
    if request.headers.get("anthropic-version"):
        data = [
            {"type": "model", "id": n, "display_name": n, "created_at": "1970-01-01T00:00:00Z"}
            for n in names
        ]
        first, last = (names[0], names[-1]) if names else (None, None)
        return JSONResponse({"data": data, "has_more": False, "first_id": first, "last_id": last})
    return JSONResponse(
        {"object": "list",
         "data": [{"id": n, "object": "model", "created": 0, "owned_by": "mirrorgate"}
                  for n in names]}
    )  # fmt: skip


@public_router.get("/healthz")
async def healthz() -> JSONResponse:
    return JSONResponse({"status": "ok"})


@public_router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    parts = public_parts(request)
    reachable = await asyncio.to_thread(parts.store_ok)
    ready = parts.started()
    problem = parts.write_problem()
    ok = ready and reachable and problem is None
    body: dict[str, object] = {
        "status": "ready" if ok else "not ready",
        "store": reachable,
        "config": ready,
        "writes": problem is None,
    }
    if not ok:
        body["reason"] = redact(
            problem or ("the store does not answer" if not reachable else "the gateway is starting")
        )
    return JSONResponse(body, status_code=200 if ok else 503)


@public_router.get("/metrics")
async def metrics(request: Request) -> Response:
    parts = public_parts(request)
    if parts.exposition is None:
        body = generate_latest(parts.registry)
    else:
        body = await parts.exposition(request)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
