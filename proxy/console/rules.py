"""The rules page (`/ui/rules`)."""

# No `from __future__ import annotations`: FastAPI reads the dependencies in the routes'
# annotations, which name this function's locals.

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import HTMLResponse

from .auth import Principal
from .layout import page
from .parts import ConsoleParts


def rules_router(parts: ConsoleParts) -> APIRouter:
    router = APIRouter(prefix="/ui")
    auth = parts.auth

    @router.get("/rules")
    async def rules(principal: Annotated[Principal, Depends(auth.admin_page)]) -> HTMLResponse:
        return page(
            title="Rules",
            principal=principal,
            csrf=auth.csrf_token(principal),
            active="rules",
            body="<p>Rules.</p>",
        )

    return router
