"""Who is looking at the console, and what they may do: sign-in tokens, the session cookie, CSRF.

Two kinds of people sign in on `/ui/signin` with a token:

- **admin**: the admin API's token (the variable named by `server.admin_token_env`). Where that
  variable is unset the admin API is open (the config allows it on a loopback listener only), and
  so is the console's admin sign-in: an empty token signs in as admin;
- **reviewer**: one of the comma-separated tokens in the variable named by
  `server.reviewer_tokens_env`. A reviewer sees the review pages only.

A signed-in browser holds one cookie, `mirrorgate_console` (HttpOnly, SameSite=Strict, Path=/ui,
Secure when `server.external_url` is https): `v1.<payload>.<mac>`, the payload naming the role,
the reviewer id, a random session nonce and the expiry, the mac an HMAC-SHA256 under a key every
replica shares (`SigningKeyStore`, "console-sessions"). A cookie that is malformed, forged,
expired, or whose token is no longer configured is no session at all.

A reviewer id (`Principal.reviewer_id`) is an HMAC of the token under another shared key
("console-reviewer-ids"): stable across restarts and replicas, and it never reveals the token.

Every POST is checked three ways, each failure a 403: the `Host` and `Origin` of
`proxy.api.StateChangeGuard` (a page of another site, a rebound name), the session, and the CSRF
token bound to the session (`csrf_token`), sent as the form field `csrf` or the header
`x-csrf-token`. The sign-in form itself carries a token bound to a pre-session cookie
(`mirrorgate_signin`), so no other site can sign a browser in under its own token.

Tokens are compared by their SHA-256 in constant time (every known token is compared); sign-in
attempts are rate-limited per client address (`TokenBuckets`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import orjson
from fastapi import Request

from proxy.api import StateChangeGuard, TokenBuckets
from proxy.config import reviewer_tokens
from proxy.core import GatewayError

from .refusal import ConsoleRefusal

Role = Literal["admin", "reviewer"]

SESSION_COOKIE = "mirrorgate_console"
SIGNIN_COOKIE = "mirrorgate_signin"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
SESSION_TTL_S = 8 * 3600
"""A session lasts a working day; then the browser signs in again."""
SIGNIN_TTL_S = 3600
"""A sign-in form is good for an hour."""
MAX_COOKIE_CHARS = 1024
"""Our cookies are about 200 characters; a longer one is not ours and is not decoded."""
SIGNIN_RATE_PER_S = 0.2
SIGNIN_BURST = 10
"""Ten sign-in attempts at once per client address, then one every five seconds."""
OPEN_ADMIN_ID = "admin-open"
"""The admin's reviewer id where no admin token is configured (loopback only)."""


@dataclass(frozen=True, slots=True)
class Principal:
    """A signed-in person."""

    role: Role
    """`admin` may see and do everything; `reviewer` may only review."""
    reviewer_id: str
    """Stable across restarts and replicas; never reveals the token (an HMAC of it)."""
    session: str = ""
    """The session's random nonce: what its CSRF token is bound to."""

    @property
    def admin(self) -> bool:
        return self.role == "admin"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class ConsoleAuth:
    """Signs sessions in and checks them. `load` must be given the shared keys before the first
    request (the app's lifespan does it, off the event loop)."""

    def __init__(
        self,
        admin_token: str,
        reviewer_tokens: Sequence[str],
        guard: StateChangeGuard,
        *,
        secure_cookies: bool = False,
        clock: Callable[[], float] = time.time,
        signin_limits: TokenBuckets | None = None,
    ) -> None:
        self._admin_digest = hashlib.sha256(admin_token.encode()).digest() if admin_token else None
        self._reviewer_digests = [hashlib.sha256(t.encode()).digest() for t in reviewer_tokens]
        self._admin_token = admin_token
        self._reviewer_tokens = tuple(reviewer_tokens)
        self.guard = guard
        self.secure_cookies = secure_cookies
        self._clock = clock
        self.signin_limits = signin_limits or TokenBuckets(SIGNIN_RATE_PER_S, SIGNIN_BURST)
        self._session_key = b""
        self._id_key = b""
        self._admin_id = OPEN_ADMIN_ID
        self._reviewer_ids: frozenset[str] = frozenset()

    @property
    def admin_open(self) -> bool:
        """No admin token is configured: an empty token signs in as admin (loopback only)."""
        return self._admin_digest is None

    def load(self, session_key: bytes, id_key: bytes) -> None:
        """Take the shared keys: one signs sessions, the other derives reviewer ids."""
        self._session_key = session_key
        self._id_key = id_key
        if self._admin_token:
            self._admin_id = "admin-" + self._id_of(self._admin_token)
        self._reviewer_ids = frozenset("rev-" + self._id_of(t) for t in self._reviewer_tokens)

    def _id_of(self, token: str) -> str:
        return hmac.new(self._id_key, b"id|" + token.encode(), hashlib.sha256).hexdigest()[:16]

    def _mac(self, purpose: bytes, data: bytes) -> bytes:
        if not self._session_key:
            raise RuntimeError("ConsoleAuth.load was not called: no session key")
        return hmac.new(self._session_key, purpose + b"|" + data, hashlib.sha256).digest()

    # --- tokens -------------------------------------------------------------------------------

    def principal_of(self, token: str) -> Principal | None:
        """Who `token` signs in as (None: nobody). Every known token is compared, in constant
        time, so the time taken says nothing about which came close."""
        given = token.strip()
        if not given:
            return self._principal("admin", self._admin_id) if self.admin_open else None
        digest = hashlib.sha256(given.encode("utf-8", "replace")).digest()
        admin = self._admin_digest is not None and hmac.compare_digest(digest, self._admin_digest)
        reviewer = False
        for known in self._reviewer_digests:
            reviewer |= hmac.compare_digest(digest, known)
        if admin:
            return self._principal("admin", self._admin_id)
        if reviewer:
            return self._principal("reviewer", "rev-" + self._id_of(given))
        return None

    def _principal(self, role: Role, reviewer_id: str) -> Principal:
        return Principal(role, reviewer_id, secrets.token_urlsafe(16))

    # --- the session cookie -------------------------------------------------------------------

    def session_cookie(self, principal: Principal) -> str:
        """The cookie value that carries `principal` until SESSION_TTL_S from now."""
        payload = orjson.dumps(
            {
                "role": principal.role,
                "rid": principal.reviewer_id,
                "n": principal.session,
                "exp": int(self._clock()) + SESSION_TTL_S,
            }
        )
        return f"v1.{_b64(payload)}.{_b64(self._mac(b'session', payload))}"

    def session_of(self, request: Request) -> Principal | None:
        """The request's signed-in principal, or None (no cookie, or one that is malformed,
        forged, expired, or of a token no longer configured)."""
        value = request.cookies.get(SESSION_COOKIE, "")
        if not value or len(value) > MAX_COOKIE_CHARS:
            return None
        version, _, rest = value.partition(".")
        encoded, _, mac = rest.partition(".")
        if version != "v1" or not encoded or not mac:
            return None
        try:
            payload = _unb64(encoded)
            given_mac = _unb64(mac)
        except ValueError:
            return None
        if not hmac.compare_digest(given_mac, self._mac(b"session", payload)):
            return None
        try:
            data = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(data, dict):
            return None
        role, rid, nonce, expires = (
            data.get("role"),
            data.get("rid"),
            data.get("n"),
            data.get("exp"),
        )
        if not (isinstance(rid, str) and isinstance(nonce, str) and isinstance(expires, int)):
            return None
        if expires <= self._clock():
            return None
        if role == "admin" and rid == self._admin_id:
            return Principal("admin", rid, nonce)
        if role == "reviewer" and rid in self._reviewer_ids:
            return Principal("reviewer", rid, nonce)
        return None  # the token it was made from is no longer configured

    def cookie_header(self, name: str, value: str, max_age: int) -> str:
        """A `Set-Cookie` value with the console's flags."""
        secure = "; Secure" if self.secure_cookies else ""
        return f"{name}={value}; Max-Age={max_age}; Path=/ui; HttpOnly; SameSite=Strict{secure}"

    # --- CSRF ---------------------------------------------------------------------------------

    def csrf_token(self, principal: Principal) -> str:
        """The CSRF token of `principal`'s session: every form carries it as `csrf`, every
        script's POST as `x-csrf-token`."""
        data = f"{principal.reviewer_id}|{principal.session}".encode()
        return _b64(self._mac(b"csrf", data))

    def csrf_ok(self, principal: Principal, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(
            (given or "").encode("utf-8", "replace"), self.csrf_token(principal).encode()
        )

    def signin_nonce(self) -> str:
        """A new pre-session nonce: the value of the sign-in form's cookie."""
        stamp = int(self._clock()) + SIGNIN_TTL_S
        return f"{stamp}.{secrets.token_urlsafe(16)}"

    def signin_csrf(self, nonce: str) -> str:
        """The sign-in form's CSRF token, bound to its cookie's nonce."""
        return _b64(self._mac(b"signin", nonce.encode("utf-8", "replace")))

    def signin_csrf_ok(self, request: Request, given: str | None) -> bool:
        nonce = request.cookies.get(SIGNIN_COOKIE, "")
        if not nonce or len(nonce) > MAX_COOKIE_CHARS or not given:
            return False
        stamp, _, _ = nonce.partition(".")
        if not stamp.isdigit() or int(stamp) <= self._clock():
            return False
        return hmac.compare_digest(
            given.encode("utf-8", "replace"), self.signin_csrf(nonce).encode()
        )

    # --- FastAPI dependencies -----------------------------------------------------------------

    def refuse_foreign(self, request: Request, *, json: bool) -> None:
        """403 for a POST under another `Host` or from another `Origin` (`StateChangeGuard`).

        The console's pages send `Referrer-Policy: no-referrer`, under which a browser posts
        their own forms with `Origin: null`; it then also says `Sec-Fetch-Site: same-origin`,
        a header no page can set. That pair is our own page: its `Origin` is left out and the
        `Host` still checked. A `null` origin from anywhere else is refused."""
        headers = request.headers
        if headers.get("origin") == "null" and headers.get("sec-fetch-site") == "same-origin":
            scope = dict(request.scope)
            scope["headers"] = [(k, v) for k, v in request.scope["headers"] if k != b"origin"]
            request = Request(scope)
        try:
            self.guard.refuse_foreign(request)
        except GatewayError as exc:
            raise ConsoleRefusal(403, str(exc), json=json) from None

    def page_principal(self, request: Request) -> Principal:
        """The signed-in principal of a page; a browser that is not signed in is sent to the
        sign-in page (and back here after it), a POST without a session is refused."""
        principal = self.session_of(request)
        if principal is None:
            if request.method in ("GET", "HEAD"):
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                raise ConsoleRefusal.sign_in(target)
            raise ConsoleRefusal(403, "you are not signed in (or your session has ended)")
        if request.method not in ("GET", "HEAD"):
            self.refuse_foreign(request, json=False)
        return principal

    def api_principal(self, request: Request) -> Principal:
        """The signed-in principal of a JSON call (401 without one); a POST also needs the
        session's CSRF token in `x-csrf-token` and our `Host`/`Origin` (else 403)."""
        principal = self.session_of(request)
        if principal is None:
            raise ConsoleRefusal(401, "sign in on /ui/signin first", json=True)
        if request.method not in ("GET", "HEAD"):
            self.refuse_foreign(request, json=True)
            if not self.csrf_ok(principal, request.headers.get(CSRF_HEADER)):
                raise ConsoleRefusal(
                    403, f"the {CSRF_HEADER} header is missing or wrong", json=True
                )
        return principal

    def admin_page(self, request: Request) -> Principal:
        """`page_principal`, for admins only (403 for a reviewer)."""
        principal = self.page_principal(request)
        if not principal.admin:
            raise ConsoleRefusal(403, "this page is for admins; reviewers may only review")
        return principal

    def admin_api(self, request: Request) -> Principal:
        """`api_principal`, for admins only (403 for a reviewer)."""
        principal = self.api_principal(request)
        if not principal.admin:
            raise ConsoleRefusal(403, "admins only; reviewers may only review", json=True)
        return principal


def console_auth_from_env(
    admin_token_env: str,
    reviewer_tokens_env: str,
    env: Mapping[str, str],
    guard: StateChangeGuard,
    *,
    secure_cookies: bool,
) -> ConsoleAuth:
    """The console's auth from the variables the config names."""
    return ConsoleAuth(
        env.get(admin_token_env) or "",
        reviewer_tokens(env.get(reviewer_tokens_env)),
        guard,
        secure_cookies=secure_cookies,
    )
