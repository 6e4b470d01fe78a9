"""Reading the console's form posts: one size-limited, type-checked parse, and the one check of
where a sign-in may send the browser next.

    415  the body is not `application/x-www-form-urlencoded`
    413  it is longer than the form's limit (by its declared length, or while reading)
    400  it is not a form, repeats a field, or has a field we do not take
"""

from __future__ import annotations

from collections.abc import Collection
from urllib.parse import parse_qsl, urlsplit

from fastapi import Request

from proxy.api import read_limited
from proxy.core import GatewayError

from .refusal import ConsoleRefusal

FORM_TYPE = "application/x-www-form-urlencoded"
MAX_FORM_BYTES = 16 * 1024
"""A console form holds a token or a reason: 16 KiB is far beyond either."""
MAX_FIELDS = 20


async def read_form(
    request: Request, fields: Collection[str], *, limit: int = MAX_FORM_BYTES
) -> dict[str, str]:
    """The posted form's fields (each at most once, only those named in `fields`)."""
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != FORM_TYPE:
        raise ConsoleRefusal(415, f"the console's forms are posted as {FORM_TYPE}")
    try:
        raw = await read_limited(request, limit, "the form")
    except GatewayError as exc:
        raise ConsoleRefusal(exc.status, str(exc)) from None
    try:
        pairs = parse_qsl(
            raw.decode("utf-8"),
            keep_blank_values=True,
            strict_parsing=bool(raw),
            max_num_fields=MAX_FIELDS,
            errors="strict",
        )
    except (UnicodeDecodeError, ValueError):
        raise ConsoleRefusal(400, "the body is not a form") from None
    form: dict[str, str] = {}
    for name, value in pairs:
        if name not in fields:
            raise ConsoleRefusal(400, f"the form has no field '{name[:50]}'")
        if name in form:
            raise ConsoleRefusal(400, f"the field '{name[:50]}' is given twice")
        form[name] = value
    return form


def safe_next(target: str | None) -> str:
    """Where the browser goes after signing in: `target` when it is a path of the console on
    this gateway, else the console's start page (never another site: no scheme, no host, no
    `//` or `\\` that a browser would read as one)."""
    default = "/ui"
    if not target or len(target) > 2000:
        return default
    if any(c in target for c in "\\\r\n\t") or any(ord(c) < 0x20 for c in target):
        return default
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or target.startswith("//"):
        return default
    path = parts.path
    if not (path == "/ui" or path.startswith("/ui/")) or "/../" in path or path.endswith("/.."):
        return default
    if path.startswith("/ui/signin") or path.startswith("/ui/signout"):
        return default
    return target
