"""`/ui`: the console's routes, put together for the app to mount."""

# No `from __future__ import annotations`: FastAPI reads the dependencies in the routes'
# annotations, which name this function's locals.

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import RedirectResponse

from .auth import Principal
from .experiments import experiments_router
from .layout import security_headers
from .parts import ConsoleParts
from .review import review_router
from .rollouts import rollouts_router
from .rules import rules_router
from .signin import build_signin_router
from .static_files import build_static_router


def console_router(parts: ConsoleParts) -> APIRouter:
    """Every console route: sign-in, static assets, the start page and each page's router."""
    router = APIRouter()
    auth = parts.auth
    router.include_router(build_signin_router(auth))
    router.include_router(build_static_router())

    @router.get("/ui")
    @router.get("/ui/")
    async def start(
        principal: Annotated[Principal, Depends(auth.page_principal)],
    ) -> RedirectResponse:
        """Admins start at the rollouts, reviewers at the review queue."""
        target = "/ui/rollouts" if principal.admin else "/ui/review"
        return RedirectResponse(target, 303, headers=security_headers())

    router.include_router(review_router(parts))
    router.include_router(rollouts_router(parts))
    router.include_router(rules_router(parts))
    router.include_router(experiments_router(parts))
    return router
