"""The blind review pages (`/ui/review…`) and their JSON calls (`/ui/api/review/…`).

A placeholder until the review queue exists: it says there is nothing to review yet.
"""

# No `from __future__ import annotations`: FastAPI reads the dependencies in the routes'
# annotations, which name this function's locals.

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import HTMLResponse

from .auth import Principal
from .layout import page
from .parts import ConsoleParts


def review_router(parts: ConsoleParts) -> APIRouter:
    router = APIRouter(prefix="/ui")
    auth = parts.auth

    @router.get("/review")
    async def review(principal: Annotated[Principal, Depends(auth.page_principal)]) -> HTMLResponse:
        return page(
            title="Review",
            principal=principal,
            csrf=auth.csrf_token(principal),
            active="review",
            body='<p class="empty">No pairs to review yet.</p>',
        )

    return router
