"""Signing in and out of the console.

GET  /ui/signin    the form: a token field, `next` (where to go after), its CSRF token
POST /ui/signin    form-encoded `token`, `next`, `csrf` → 303 to `next` with the session
                   cookie; a wrong token is the form again (401), too many attempts 429
POST /ui/signout   form-encoded `csrf` → 303 to /ui/signin, the cookie cleared
"""

# No `from __future__ import annotations`: FastAPI reads the routes' dependencies from their
# annotations.

import math
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response

from .auth import SESSION_COOKIE, SESSION_TTL_S, SIGNIN_COOKIE, SIGNIN_TTL_S, ConsoleAuth, Principal
from .forms import read_form, safe_next
from .layout import esc, page, security_headers
from .parts import console_parts, page_principal
from .refusal import ConsoleRefusal

MAX_SIGNIN_BYTES = 4096


def _form(auth: ConsoleAuth, nonce: str, target: str, problem: str = "") -> str:
    alert = f'<p class="problem" role="alert">{esc(problem)}</p>' if problem else ""
    note = (
        '<p class="note">No admin token is set on this loopback gateway (its admin API is '
        "open too): leave the field empty to sign in as admin.</p>"
        if auth.admin_open
        else ""
    )
    return (
        f"{alert}"
        '<form class="signin" method="post" action="/ui/signin">'
        f'<input type="hidden" name="csrf" value="{esc(auth.signin_csrf(nonce))}">'
        f'<input type="hidden" name="next" value="{esc(target)}">'
        '<label for="token">Token</label>'
        '<input id="token" name="token" type="password" autocomplete="current-password" '
        'autofocus spellcheck="false" aria-describedby="token-help">'
        '<p id="token-help" class="help">The admin token, or a reviewer token your admin gave '
        "you.</p>"
        '<button type="submit">Sign in</button></form>'
        f"{note}"
    )


def _form_page(auth: ConsoleAuth, target: str, problem: str = "", status: int = 200) -> Response:
    nonce = auth.signin_nonce()
    response = page(
        title="Sign in",
        principal=None,
        csrf="",
        active="",
        body=_form(auth, nonce, target, problem),
        status=status,
    )
    response.headers.append("set-cookie", auth.cookie_header(SIGNIN_COOKIE, nonce, SIGNIN_TTL_S))
    return response


# Built once per process: the endpoints reach their gateway's `ConsoleAuth` through the request.
signin_router = APIRouter(prefix="/ui")


@signin_router.get("/signin")
async def signin_form(request: Request, next: str = "/ui") -> Response:
    return _form_page(console_parts(request).auth, safe_next(next))


@signin_router.post("/signin")
async def signin(request: Request) -> Response:
    auth = console_parts(request).auth
    auth.refuse_foreign(request, json=False)
    address = request.client.host if request.client is not None else "unknown"
    wait = auth.signin_limits.take(address)
    if wait > 0:
        raise ConsoleRefusal(
            429,
            f"too many sign-in attempts from this address: try again in {math.ceil(wait)} s",
            headers={"retry-after": str(max(1, math.ceil(wait)))},
        )
    form = await read_form(request, ("token", "next", "csrf"), limit=MAX_SIGNIN_BYTES)
    target = safe_next(form.get("next"))
    if not auth.signin_csrf_ok(request, form.get("csrf")):
        raise ConsoleRefusal(
            403,
            "this sign-in form has expired or did not come from this gateway: "
            "open /ui/signin and try again",
        )
    principal = auth.principal_of(form.get("token", ""))
    if principal is None:
        return _form_page(auth, target, "That token is not right.", status=401)
    response = RedirectResponse(target, 303, headers=security_headers())
    response.headers.append(
        "set-cookie",
        auth.cookie_header(SESSION_COOKIE, auth.session_cookie(principal), SESSION_TTL_S),
    )
    response.headers.append("set-cookie", auth.cookie_header(SIGNIN_COOKIE, "", 0))
    return response


@signin_router.post("/signout")
async def signout(
    request: Request, principal: Annotated[Principal, Depends(page_principal)]
) -> Response:
    auth = console_parts(request).auth
    form = await read_form(request, ("csrf",))
    if not auth.csrf_ok(principal, form.get("csrf")):
        raise ConsoleRefusal(403, "the form's CSRF token is missing or wrong")
    response = RedirectResponse("/ui/signin", 303, headers=security_headers())
    response.headers.append("set-cookie", auth.cookie_header(SESSION_COOKIE, "", 0))
    return response
