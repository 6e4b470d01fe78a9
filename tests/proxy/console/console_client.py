"""Signing a test client in to the console of an in-process gateway, as a browser would: the
sign-in form first (its cookie and CSRF token), then the post; and a bare console app on a
gateway's parts."""

from __future__ import annotations

import re
from typing import Any

import httpx
from fastapi import FastAPI

from proxy.console import ConsoleParts, console_routes, install_console_errors
from tests.conftest import InProcessGateway

ADMIN_TOKEN = "console-admin-t0ken-for-tests"
REVIEWER_TOKENS = ("reviewer-one-t0ken-for-tests", "reviewer-two-t0ken-for-tests")
ENV = {
    "MIRRORGATE_ADMIN_TOKEN": ADMIN_TOKEN,
    "MIRRORGATE_REVIEWER_TOKENS": ",".join(REVIEWER_TOKENS),
}
FORM = {"content-type": "application/x-www-form-urlencoded"}


def console_app(parts: ConsoleParts) -> FastAPI:
    """An app serving only the console, on `parts`: the gateway's wiring in small (the console's
    routes as the app's own, its parts on `app.state`, its error answers)."""
    app = FastAPI(routes=console_routes)
    app.state.console_parts = parts
    install_console_errors(app)
    return app


def hidden(html: str, name: str) -> str:
    """The value of the page's hidden field `name` (the first one)."""
    found = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert found is not None, f"no hidden field {name!r} in the page"
    return found.group(1)


def sign_in(client: httpx.Client, token: str, next_path: str = "/ui") -> httpx.Response:
    """Open the sign-in form and post `token` with it; the answer (not followed)."""
    form = client.get("/ui/signin", params={"next": next_path})
    assert form.status_code == 200, form.text
    return client.post(
        "/ui/signin",
        data={"token": token, "next": hidden(form.text, "next"), "csrf": hidden(form.text, "csrf")},
    )


def signed_in(gateway: InProcessGateway, token: str, **kwargs: Any) -> httpx.Client:
    """A new client of `gateway`, signed in with `token`."""
    client = gateway.client(**kwargs)
    answer = sign_in(client, token)
    assert answer.status_code == 303, answer.text
    return client


def csrf_of(client: httpx.Client, path: str = "/ui/review") -> str:
    """The session's CSRF token, read from a page's sign-out form."""
    page = client.get(path)
    assert page.status_code == 200, page.text
    return hidden(page.text, "csrf")
