"""The rollouts and guard pages (`/ui/rollouts…`)."""

# No `from __future__ import annotations`: FastAPI reads the dependencies in the routes'
# annotations, which name this function's locals.

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import HTMLResponse

from .auth import Principal
from .layout import page
from .parts import ConsoleParts


def rollouts_router(parts: ConsoleParts) -> APIRouter:
    router = APIRouter(prefix="/ui")
    auth = parts.auth

    @router.get("/rollouts")
    async def rollouts(principal: Annotated[Principal, Depends(auth.admin_page)]) -> HTMLResponse:
        return page(
            title="Rollouts",
            principal=principal,
            csrf=auth.csrf_token(principal),
            active="rollouts",
            body="<p>Rollouts.</p>",
        )

    return router
