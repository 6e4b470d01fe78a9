"""The console's page shell: escaping, the layout every page shares, and its security headers.

Everything a page shows that came from a model, a client or the store — prompts, answers,
reasons, rule diffs, route names — goes through `esc` before it joins the HTML: answers are
untrusted HTML. Pages carry no inline script or style (the CSP below forbids both); their
behaviour is in /ui/static/*.js, their looks in /ui/static/console.css.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastapi.responses import HTMLResponse

if TYPE_CHECKING:
    from .auth import Principal

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)


def security_headers() -> dict[str, str]:
    """The headers of every console answer: no inline script or style, no framing, no sniffing,
    no referrer, no caching (pages show prompts and answers)."""
    return {
        "content-security-policy": CONTENT_SECURITY_POLICY,
        "x-content-type-options": "nosniff",
        "referrer-policy": "no-referrer",
        "cache-control": "no-store",
        "x-frame-options": "DENY",
    }


def esc(text: object) -> str:
    """`text` as HTML text (quotes included, so it is safe in attribute values too)."""
    return html.escape("" if text is None else str(text), quote=True)


@dataclass(frozen=True, slots=True)
class NavEntry:
    """One entry of the navigation."""

    key: str
    """What `page(active=...)` names to mark the entry as the current page."""
    label: str
    href: str
    admin_only: bool


NAV: tuple[NavEntry, ...] = (
    NavEntry("review", "Review", "/ui/review", admin_only=False),
    NavEntry("rollouts", "Rollouts", "/ui/rollouts", admin_only=True),
    NavEntry("rules", "Rules", "/ui/rules", admin_only=True),
    NavEntry("experiments", "Experiments", "/ui/experiments", admin_only=True),
)
"""Reviewers see only Review; admins see every entry."""


def _nav(principal: Principal | None, active: str) -> str:
    if principal is None:
        return ""
    items = []
    for entry in NAV:
        if entry.admin_only and not principal.admin:
            continue
        current = ' aria-current="page"' if entry.key == active else ""
        items.append(f'<li><a href="{esc(entry.href)}"{current}>{esc(entry.label)}</a></li>')
    return f'<nav aria-label="Console"><ul class="nav">{"".join(items)}</ul></nav>'


def _account(principal: Principal | None, csrf: str) -> str:
    if principal is None:
        return ""
    who = "admin" if principal.admin else f"reviewer {principal.reviewer_id}"
    return (
        '<form class="signout" method="post" action="/ui/signout">'
        f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
        f'<span class="who">Signed in as {esc(who)}</span> '
        '<button type="submit">Sign out</button></form>'
    )


def page(
    *,
    title: str,
    principal: Principal | None,
    csrf: str,
    active: str,
    body: str,
    scripts: Sequence[str] = (),
    status: int = 200,
) -> HTMLResponse:
    """A whole console page around `body` (already escaped HTML): skip link, banner with the
    navigation for `principal`'s role, the main landmark, and `scripts` (names under
    /ui/static/) after the shell's own console.js."""
    tags = "".join(
        f'<script src="/ui/static/{esc(name)}" defer></script>' for name in ("console.js", *scripts)
    )
    document = (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · mirrorgate</title>"
        '<link rel="stylesheet" href="/ui/static/console.css">'
        f"{tags}</head><body>"
        '<a class="skip" href="#main">Skip to content</a>'
        '<header class="banner"><a class="brand" href="/ui">mirrorgate</a>'
        f"{_nav(principal, active)}{_account(principal, csrf)}</header>"
        f'<main id="main" tabindex="-1"><h1>{esc(title)}</h1>{body}</main>'
        "</body></html>"
    )
    return HTMLResponse(document, status, headers=security_headers())


def error_page(status: int, message: str) -> HTMLResponse:
    """A page that says why a request was refused, with a way back."""
    body = (
        f'<p class="problem" role="alert">{esc(message)}</p>'
        '<p><a href="/ui">Back to the console</a></p>'
    )
    titles = {400: "Bad request", 401: "Sign in", 403: "Not allowed", 404: "Not found",
              413: "Too large", 415: "Not a form", 429: "Too many attempts"}  # fmt: skip
    return page(
        title=titles.get(status, "Refused"),
        principal=None,
        csrf="",
        active="",
        body=body,
        status=status,
    )
