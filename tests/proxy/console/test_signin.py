"""Signing in and out of a gateway's console (in process): the cookie and its flags, where the
browser goes next, and every sign-in that is refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.conftest import InProcessGateway
from tests.proxy.console.console_client import (
    ADMIN_TOKEN,
    ENV,
    FORM,
    REVIEWER_TOKENS,
    hidden,
    sign_in,
    signed_in,
)

Start = Callable[..., InProcessGateway]


@pytest.fixture
def gateway(start_gateway: Start) -> InProcessGateway:
    return start_gateway(env=ENV)


def test_the_admin_signs_in_and_gets_an_http_only_strict_cookie(gateway: InProcessGateway) -> None:
    client = gateway.client()
    answer = sign_in(client, ADMIN_TOKEN, "/ui/rules")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/ui/rules"
    session = next(c for c in answer.headers.get_list("set-cookie") if "mirrorgate_console=" in c)
    assert "HttpOnly" in session and "SameSite=Strict" in session and "Path=/ui" in session
    assert ADMIN_TOKEN not in session
    assert client.get("/ui").headers["location"] == "/ui/rollouts"
    assert client.get("/ui/rules").status_code == 200


def test_a_reviewer_signs_in_and_starts_at_the_review_page(gateway: InProcessGateway) -> None:
    client = signed_in(gateway, REVIEWER_TOKENS[1])
    assert client.get("/ui").headers["location"] == "/ui/review"
    page = client.get("/ui/review")
    assert page.status_code == 200
    assert 'href="/ui/review"' in page.text
    assert 'href="/ui/rollouts"' not in page.text and 'href="/ui/rules"' not in page.text


def test_a_page_without_a_session_sends_the_browser_to_sign_in_and_back(
    gateway: InProcessGateway,
) -> None:
    client = gateway.client()
    answer = client.get("/ui/rules", params={"since": "1h"})
    assert answer.status_code == 303
    assert answer.headers["location"] == "/ui/signin?next=/ui/rules%3Fsince%3D1h"
    form = client.get(answer.headers["location"])
    assert hidden(form.text, "next") == "/ui/rules?since=1h"


def test_a_wrong_token_is_refused_and_the_form_says_so(gateway: InProcessGateway) -> None:
    client = gateway.client()
    answer = sign_in(client, ADMIN_TOKEN + "-not")
    assert answer.status_code == 401
    assert "That token is not right." in answer.text
    assert "mirrorgate_console=" not in answer.headers.get("set-cookie", "")
    assert client.get("/ui/rollouts").status_code == 303


def test_an_empty_token_is_not_the_admin_where_an_admin_token_is_set(
    gateway: InProcessGateway,
) -> None:
    assert sign_in(gateway.client(), "").status_code == 401


def test_without_an_admin_token_the_loopback_console_signs_in_as_admin(
    start_gateway: Start,
) -> None:
    gateway = start_gateway(env={"MIRRORGATE_REVIEWER_TOKENS": REVIEWER_TOKENS[0]})
    client = gateway.client()
    assert "leave the field empty to sign in as admin" in client.get("/ui/signin").text
    assert sign_in(client, "").status_code == 303
    assert client.get("/ui/rollouts").status_code == 200
    reviewer = signed_in(gateway, REVIEWER_TOKENS[0])
    assert reviewer.get("/ui/rollouts").status_code == 403


@pytest.mark.parametrize(
    "target",
    [
        "https://evil.example/",
        "//evil.example/ui",
        "/\\evil.example",
        "\\\\evil.example",
        "/ui\r\nlocation: https://evil.example",
        "javascript:alert(1)",
        "/admin/rollouts",
        "/ui/../admin",
        "/ui/signout",
        "ui/rollouts",
        "/uievil",
        "/ui/" + "a" * 3000,
    ],
    ids=[
        "https",
        "scheme-relative",
        "backslash",
        "unc",
        "crlf",
        "javascript",
        "admin",
        "dot-dot",
        "signout",
        "relative",
        "prefix",
        "long",
    ],
)
def test_next_never_leaves_the_console(gateway: InProcessGateway, target: str) -> None:
    answer = sign_in(gateway.client(), ADMIN_TOKEN, target)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/ui"


def _signin_post(client: httpx.Client, **data: str) -> httpx.Response:
    form = client.get("/ui/signin")
    fields = {"token": ADMIN_TOKEN, "next": "/ui", "csrf": hidden(form.text, "csrf"), **data}
    return client.post("/ui/signin", data={k: v for k, v in fields.items() if v != "-"})


def test_a_signin_without_its_form_token_is_refused(gateway: InProcessGateway) -> None:
    client = gateway.client()
    assert _signin_post(client, csrf="-").status_code == 403
    assert _signin_post(client, csrf="forged").status_code == 403
    # a form token from another browser (another sign-in cookie) is no good either
    other = gateway.client()
    token = hidden(other.get("/ui/signin").text, "csrf")
    fresh = gateway.client()
    answer = fresh.post("/ui/signin", data={"token": ADMIN_TOKEN, "csrf": token})
    assert answer.status_code == 403
    assert "mirrorgate_console=" not in answer.headers.get("set-cookie", "")


@pytest.mark.parametrize(
    ("headers", "body", "status"),
    [
        ({"content-type": "application/json"}, b'{"token": "x"}', 415),
        ({"content-type": "multipart/form-data; boundary=x"}, b"--x--", 415),
        ({}, b"token=x", 415),
        (FORM, b"token=" + b"a" * 5000, 413),
        (FORM, b"token=a&token=b", 400),
        (FORM, b"token=a&admin=1", 400),
        (FORM, b"token=%ff%fe", 400),
        (FORM, b"&".join(b"f%d=1" % i for i in range(50)), 400),
    ],
    ids=["json", "multipart", "no-type", "oversized", "twice", "unknown", "not-utf8", "many"],
)
def test_a_malformed_signin_is_refused_clearly(
    gateway: InProcessGateway, headers: dict[str, str], body: bytes, status: int
) -> None:
    client = gateway.client()
    client.get("/ui/signin")
    answer = client.post("/ui/signin", content=body, headers=headers)
    assert answer.status_code == status
    assert answer.headers["content-type"].startswith("text/html")
    assert 'role="alert"' in answer.text


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "https://evil.example"},
        {"origin": "https://evil.example", "sec-fetch-site": "same-origin"},
        {"origin": "null"},
        {"origin": "null", "sec-fetch-site": "cross-site"},
        {"host": "evil.example"},
        {"host": "evil.example", "origin": "null", "sec-fetch-site": "same-origin"},
    ],
    ids=["origin", "origin-claims-same", "null", "null-cross-site", "host", "host-null-same"],
)
def test_a_signin_from_another_site_is_refused(
    gateway: InProcessGateway, headers: dict[str, str]
) -> None:
    client = gateway.client()
    form = client.get("/ui/signin")
    data = {"token": ADMIN_TOKEN, "csrf": hidden(form.text, "csrf")}
    answer = client.post("/ui/signin", data=data, headers=headers)
    assert answer.status_code == 403
    assert "mirrorgate_console=" not in answer.headers.get("set-cookie", "")


def test_our_own_form_posted_under_no_referrer_signs_in(gateway: InProcessGateway) -> None:
    """Under `Referrer-Policy: no-referrer` Chromium posts a page's own form with `Origin:
    null` and `Sec-Fetch-Site: same-origin`."""
    client = gateway.client()
    form = client.get("/ui/signin")
    data = {"token": ADMIN_TOKEN, "csrf": hidden(form.text, "csrf")}
    headers = {"origin": "null", "sec-fetch-site": "same-origin"}
    assert client.post("/ui/signin", data=data, headers=headers).status_code == 303


def test_signin_attempts_are_rate_limited_per_address(gateway: InProcessGateway) -> None:
    client = gateway.client()
    statuses = [sign_in(client, f"guess-{i}").status_code for i in range(12)]
    assert statuses[:10] == [401] * 10
    assert statuses[10] == 429
    limited = sign_in(client, ADMIN_TOKEN)
    assert limited.status_code == 429  # even the right token waits its turn
    assert int(limited.headers["retry-after"]) >= 1


def test_signing_out_ends_the_session(gateway: InProcessGateway) -> None:
    client = signed_in(gateway, ADMIN_TOKEN)
    page = client.get("/ui/rules")
    cookie = client.cookies.get("mirrorgate_console")
    assert client.post("/ui/signout", data={"csrf": "wrong"}).status_code == 403
    answer = client.post("/ui/signout", data={"csrf": hidden(page.text, "csrf")})
    assert answer.status_code == 303
    assert answer.headers["location"] == "/ui/signin"
    assert client.get("/ui/rules").status_code == 303
    assert cookie  # the old cookie still verifies until it expires; the browser dropped it


@pytest.mark.parametrize(
    "cookie",
    ["garbage", "v1.e30.AAAA", "v1." + "A" * 5000, "v1.eyJyb2xlIjoiYWRtaW4ifQ.AAAA"],
    ids=["garbage", "empty-payload", "huge", "unsigned-admin"],
)
def test_a_bad_cookie_is_as_good_as_none(gateway: InProcessGateway, cookie: str) -> None:
    client = gateway.client(cookies={"mirrorgate_console": cookie})
    assert client.get("/ui/rollouts").status_code == 303
    api = client.post("/ui/signout", data={"csrf": "x"})
    assert api.status_code == 403


def test_every_console_answer_carries_the_security_headers(gateway: InProcessGateway) -> None:
    client = signed_in(gateway, ADMIN_TOKEN)
    answers: list[Any] = [
        client.get("/ui/signin"),
        client.get("/ui/rules"),
        client.get("/ui/static/console.css"),
        client.get("/ui/static/nothing.js"),
        gateway.client().get("/ui/rollouts"),
    ]
    for answer in answers:
        csp = answer.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp, answer.url
        assert "unsafe-inline" not in csp
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["referrer-policy"] == "no-referrer"
        assert "no-store" in answer.headers["cache-control"] or answer.url.path.startswith(
            "/ui/static/"
        )
