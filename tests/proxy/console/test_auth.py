"""The console's tokens, session cookies and CSRF tokens, without a server: who a token signs in
as, what a cookie carries and every way a cookie is no session."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest
from starlette.requests import Request

from proxy.api import StateChangeGuard
from proxy.config import parse_config
from proxy.console import ConsoleAuth, Principal
from proxy.console.auth import SESSION_COOKIE, SESSION_TTL_S, SIGNIN_COOKIE

ADMIN = "admin-t0ken-for-unit-tests"
REVIEWERS = ("reviewer-a-t0ken-unit", "reviewer-b-t0ken-unit")
CONFIG = parse_config(
    'models: {m: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: m}}\n'
    "routes: {r: {primary: m}}\n"
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def make_auth(
    admin: str = ADMIN, reviewers: tuple[str, ...] = REVIEWERS, clock: Clock | None = None
) -> ConsoleAuth:
    auth = ConsoleAuth(admin, reviewers, StateChangeGuard(CONFIG), clock=clock or Clock())
    auth.load(b"k" * 32, b"i" * 32)
    return auth


def request(cookies: dict[str, str] | None = None, **headers: str) -> Request:
    raw = [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    if cookies:
        raw.append((b"cookie", "; ".join(f"{k}={v}" for k, v in cookies.items()).encode()))
    scope: dict[str, Any] = {
        "type": "http",
        "method": "GET",
        "path": "/ui/rollouts",
        "query_string": b"",
        "headers": raw,
        "server": ("127.0.0.1", 8080),
        "scheme": "http",
    }
    return Request(scope)


def test_each_token_signs_in_as_its_role_and_nothing_else_does() -> None:
    auth = make_auth()
    admin = auth.principal_of(ADMIN)
    first, second = (auth.principal_of(t) for t in REVIEWERS)
    assert admin is not None and admin.role == "admin"
    assert first is not None and first.role == "reviewer"
    assert second is not None and second.role == "reviewer"
    assert first.reviewer_id != second.reviewer_id
    assert auth.principal_of("") is None  # an admin token is configured: empty is nobody
    assert auth.principal_of(ADMIN + "x") is None
    assert auth.principal_of(REVIEWERS[0][:-1]) is None
    assert auth.principal_of("\udcff\x00" * 10) is None


def test_a_reviewer_id_is_stable_across_restarts_and_never_shows_the_token() -> None:
    one = make_auth().principal_of(REVIEWERS[0])
    again = make_auth().principal_of(REVIEWERS[0])  # another replica, same shared key
    assert one is not None and again is not None
    assert one.reviewer_id == again.reviewer_id
    assert one.session != again.session  # but each sign-in is its own session
    assert REVIEWERS[0] not in one.reviewer_id
    other_key = ConsoleAuth(ADMIN, REVIEWERS, StateChangeGuard(CONFIG))
    other_key.load(b"k" * 32, b"j" * 32)
    elsewhere = other_key.principal_of(REVIEWERS[0])
    assert elsewhere is not None and elsewhere.reviewer_id != one.reviewer_id


def test_without_an_admin_token_an_empty_token_signs_in_as_admin() -> None:
    auth = make_auth(admin="")
    assert auth.admin_open
    principal = auth.principal_of("  ")
    assert principal is not None and principal.role == "admin"
    reviewer = auth.principal_of(REVIEWERS[1])
    assert reviewer is not None and reviewer.role == "reviewer"


def test_a_session_cookie_carries_its_principal_until_it_expires() -> None:
    clock = Clock()
    auth = make_auth(clock=clock)
    principal = auth.principal_of(REVIEWERS[0])
    assert principal is not None
    cookie = auth.session_cookie(principal)
    assert REVIEWERS[0] not in cookie
    assert auth.session_of(request({SESSION_COOKIE: cookie})) == principal
    clock.now += SESSION_TTL_S - 1
    assert auth.session_of(request({SESSION_COOKIE: cookie})) == principal
    clock.now += 1
    assert auth.session_of(request({SESSION_COOKIE: cookie})) is None


def _forge(cookie: str, **changes: Any) -> str:
    version, payload, mac = cookie.split(".")
    data = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    forged = base64.urlsafe_b64encode(orjson.dumps({**data, **changes})).rstrip(b"=").decode()
    return f"{version}.{forged}.{mac}"


@pytest.mark.parametrize(
    "tamper",
    [
        lambda c: _forge(c, role="admin"),
        lambda c: _forge(c, exp=2_000_000_000),
        lambda c: c[:-2] + ("AA" if not c.endswith("AA") else "BB"),
        lambda c: "v2" + c[2:],
        lambda c: c.replace(".", "", 1),
        lambda c: c + "." + c,
        lambda c: "v1.!!!.###",
        lambda c: "v1." + "A" * 2000 + ".x",
        lambda c: "",
    ],
    ids=["role", "expiry", "mac", "version", "shape", "doubled", "not-base64", "huge", "empty"],
)
def test_a_tampered_cookie_is_no_session(tamper: Any) -> None:
    auth = make_auth()
    principal = auth.principal_of(REVIEWERS[0])
    assert principal is not None
    assert (
        auth.session_of(request({SESSION_COOKIE: tamper(auth.session_cookie(principal))})) is None
    )


def test_a_cookie_signed_with_another_key_is_no_session() -> None:
    auth = make_auth()
    other = ConsoleAuth(ADMIN, REVIEWERS, StateChangeGuard(CONFIG))
    other.load(b"x" * 32, b"i" * 32)
    principal = other.principal_of(ADMIN)
    assert principal is not None
    assert auth.session_of(request({SESSION_COOKIE: other.session_cookie(principal)})) is None


def test_a_session_ends_when_its_token_is_no_longer_configured() -> None:
    before = make_auth()
    principal = before.principal_of(REVIEWERS[1])
    admin = before.principal_of(ADMIN)
    assert principal is not None and admin is not None
    cookie, admin_cookie = before.session_cookie(principal), before.session_cookie(admin)
    after = make_auth(admin="a-new-admin-t0ken-after", reviewers=REVIEWERS[:1])
    assert after.session_of(request({SESSION_COOKIE: cookie})) is None
    assert after.session_of(request({SESSION_COOKIE: admin_cookie})) is None


def test_the_csrf_token_is_bound_to_its_session() -> None:
    auth = make_auth()
    one, two = auth.principal_of(ADMIN), auth.principal_of(ADMIN)
    assert one is not None and two is not None
    token = auth.csrf_token(one)
    assert auth.csrf_ok(one, token)
    assert not auth.csrf_ok(two, token)  # another sign-in of the same admin
    assert not auth.csrf_ok(one, "")
    assert not auth.csrf_ok(one, None)
    assert not auth.csrf_ok(one, token[:-1])
    assert not auth.csrf_ok(Principal("reviewer", one.reviewer_id, one.session), token + "x")


def test_the_signin_form_token_is_bound_to_its_cookie_and_expires() -> None:
    clock = Clock()
    auth = make_auth(clock=clock)
    nonce = auth.signin_nonce()
    token = auth.signin_csrf(nonce)
    assert auth.signin_csrf_ok(request({SIGNIN_COOKIE: nonce}), token)
    assert not auth.signin_csrf_ok(request({SIGNIN_COOKIE: auth.signin_nonce()}), token)
    assert not auth.signin_csrf_ok(request(), token)
    assert not auth.signin_csrf_ok(request({SIGNIN_COOKIE: nonce}), None)
    clock.now += 3600
    assert not auth.signin_csrf_ok(request({SIGNIN_COOKIE: nonce}), token)


def test_cookies_carry_the_console_flags() -> None:
    plain = make_auth().cookie_header(SESSION_COOKIE, "v", 60)
    assert "HttpOnly" in plain and "SameSite=Strict" in plain and "Path=/ui" in plain
    assert "Secure" not in plain
    secure = ConsoleAuth(ADMIN, REVIEWERS, StateChangeGuard(CONFIG), secure_cookies=True)
    assert "; Secure" in secure.cookie_header(SESSION_COOKIE, "v", 60)


def test_nothing_is_signed_before_the_keys_are_loaded() -> None:
    auth = ConsoleAuth(ADMIN, REVIEWERS, StateChangeGuard(CONFIG))
    with pytest.raises(RuntimeError, match="load"):
        auth.csrf_token(Principal("admin", "admin-x", "n"))
