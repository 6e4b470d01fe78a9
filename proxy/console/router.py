"""`/ui`: the console's routes, built once per process, for the app to take as its own.

Each route reaches the parts of the gateway serving it through `request.app.state.console_parts`
(`ConsoleParts`), so two gateways in one process share the routes and keep their own tokens,
stores and rollouts. The app takes `console_routes` as routes of its own (`FastAPI(routes=...)`):
an `include_router` would make FastAPI build them again for every app.
"""

# No `from __future__ import annotations`: FastAPI reads the routes' dependencies from their
# annotations.

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import RedirectResponse
from starlette.routing import BaseRoute

from .auth import Principal
from .experiments import experiments_router
from .layout import security_headers
from .parts import page_principal
from .review import review_router
from .rollouts import rollouts_router
from .rules import rules_router
from .signin import signin_router
from .static_files import static_router

start_router = APIRouter()


@start_router.get("/ui")
@start_router.get("/ui/")
async def start(principal: Annotated[Principal, Depends(page_principal)]) -> RedirectResponse:
    """Admins start at the rollouts, reviewers at the review queue."""
    target = "/ui/rollouts" if principal.admin else "/ui/review"
    return RedirectResponse(target, 303, headers=security_headers())


console_routes: list[BaseRoute] = [
    *signin_router.routes,
    *static_router.routes,
    *start_router.routes,
    *review_router.routes,
    *rollouts_router.routes,
    *rules_router.routes,
    *experiments_router.routes,
]
"""Every console route, matched in this order: sign-in, static assets, the start page, then each
page's routes."""
