"""The console's refusals: one exception that pages and dependencies raise, answered in the
caller's format by the handler `install_console_errors` puts on the app.

    ConsoleRefusal(status, message)             an HTML page saying why (a browser asked)
    ConsoleRefusal(status, message, json=True)  `{"error": {"type": ..., "message": ...}}`
    ConsoleRefusal.sign_in(next)                303 to /ui/signin?next=... (not signed in)
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from .layout import error_page, security_headers

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict",
    413: "request_too_large",
    415: "unsupported_media_type",
    429: "rate_limit_error",
    503: "unavailable",
}


class ConsoleRefusal(Exception):
    """Answer a console request with `status` and `message` (HTML, or JSON with `json`)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        json: bool = False,
        headers: dict[str, str] | None = None,
        location: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.json = json
        self.headers = headers or {}
        self.location = location

    @classmethod
    def sign_in(cls, target: str) -> ConsoleRefusal:
        """303 to the sign-in page, which comes back to `target` once signed in."""
        return cls(303, "sign in first", location="/ui/signin?next=" + quote(target, safe="/"))

    def response(self) -> Response:
        if self.location is not None:
            return RedirectResponse(self.location, 303, headers=security_headers())
        if self.json:
            body = {"error": {"type": _TYPES.get(self.status, "error"), "message": self.message}}
            return JSONResponse(body, self.status, headers={**security_headers(), **self.headers})
        response = error_page(self.status, self.message)
        response.headers.update(self.headers)
        return response


def install_console_errors(app: FastAPI) -> None:
    """Answer every `ConsoleRefusal` a console route raises."""

    @app.exception_handler(ConsoleRefusal)
    async def refused(_request: Request, exc: ConsoleRefusal) -> Response:
        return exc.response()
